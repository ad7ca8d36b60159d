"""idlinks/models.py: the database's own guarantees for links, whatever writes them."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from idlinks.models import IdentifierLink


def insert(subject_types, first: tuple[str, str], second: tuple[str, str]) -> None:
    (type_a, id_a), (type_b, id_b) = first, second
    IdentifierLink.objects.create(
        subject_type_a=subject_types[type_a],
        subject_id_a=id_a,
        subject_type_b=subject_types[type_b],
        subject_id_b=id_b,
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # The type created later has the larger primary key, so it belongs on side b.
        (("cookie", "c-1"), ("user", "u-1")),
        (("user", "u-2"), ("user", "u-1")),
        # Code point order whatever the collation: "B" (U+0042) sorts before "a" (U+0061).
        (("user", "a"), ("user", "B")),
        (("user", "é"), ("user", "z")),
    ],
)
def test_identifier_link__non_canonical_order__refused_by_the_database(subject_types, first, second):
    with pytest.raises(IntegrityError), transaction.atomic():
        insert(subject_types, first, second)

    insert(subject_types, second, first)
    assert IdentifierLink.objects.count() == 1


def test_identifier_link__identifier_to_itself__refused_by_the_database(subject_types):
    with pytest.raises(IntegrityError), transaction.atomic():
        insert(subject_types, ("user", "u-1"), ("user", "u-1"))


def test_identifier_link__same_pair_twice__refused_by_the_database(subject_types):
    insert(subject_types, ("user", "u-1"), ("cookie", "c-1"))

    with pytest.raises(IntegrityError), transaction.atomic():
        insert(subject_types, ("user", "u-1"), ("cookie", "c-1"))


def test_identifier_link__subject_type_with_links__cannot_be_deleted(subject_types):
    insert(subject_types, ("user", "u-1"), ("cookie", "c-1"))

    with pytest.raises(ProtectedError):
        subject_types["cookie"].delete()
