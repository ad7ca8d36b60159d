"""Identifier links made and read back: one pair through the service, or many rows at once."""

from __future__ import annotations

from django.db import connection

from assignments.models import SubjectType
from assignments.selectors import subject_types_active_steps
from idlinks.models import IdentifierLink
from idlinks.services import Identifier, id_link_create

LINK_PATH = "/id-link"


def link_body(*identifiers: tuple[str, str]) -> dict:
    return {"identifiers": [{"subject_type": t, "subject_id": i} for t, i in identifiers]}


def link(first: tuple[str, str], second: tuple[str, str]) -> None:
    id_link_create(
        first=Identifier(*first), second=Identifier(*second), subject_types_active=subject_types_active_steps
    )


def stored_links() -> list[tuple[str, str, str, str]]:
    """Every stored row as (type a, ID a, type b, ID b), type keys as configured."""
    return list(
        IdentifierLink.objects.order_by("pk").values_list(
            "subject_type_a__key", "subject_id_a", "subject_type_b__key", "subject_id_b"
        )
    )


def links_store(pairs) -> None:
    """Store links between (subject type key, subject ID) pairs, in the canonical order of idlinks."""
    types = dict(SubjectType.objects.values_list("key", "pk"))
    rows = []
    for first, second in pairs:
        (type_a, id_a), (type_b, id_b) = sorted([(types[first[0]], first[1]), (types[second[0]], second[1])])
        rows.append(
            IdentifierLink(subject_type_a_id=type_a, subject_id_a=id_a, subject_type_b_id=type_b, subject_id_b=id_b)
        )
    IdentifierLink.objects.bulk_create(rows, batch_size=5000)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE idlinks_identifierlink")


def component_store(side: int) -> None:
    """Cookies a000... each linked to each of as many cookies b000...: a component any client of
    POST /id-link can build, every identifier within 2 links of every other."""
    links_store((("cookie", f"a{i:03d}"), ("cookie", f"b{j:03d}")) for i in range(side) for j in range(side))
