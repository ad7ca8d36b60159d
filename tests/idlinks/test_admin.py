"""idlinks/admin.py: the identifier-link admin: read-only, resolving identifiers, fit for a big table."""

from __future__ import annotations

import pytest
from django.db import connection

from assignments.storage_citus import assignments_distributed
from core.admin import ESTIMATE_ABOVE_ROWS, EstimatedCountPaginator
from idlinks.models import IdentifierLink
from tests.factories import IdentifierLinkFactory, SubjectTypeFactory
from tests.helpers.idlinks import link

CHANGELIST = "/admin/idlinks/identifierlink/"


def analyze_links() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE idlinks_identifierlink")


def test_link_admin__changelist__lists_links_with_their_subject_types(admin_client, subject_types):
    link(("cookie", "c-81"), ("user", "u-1"))

    response = admin_client.get(CHANGELIST)

    assert response.status_code == 200
    content = response.content.decode()
    assert "c-81" in content
    assert "u-1" in content
    assert "Cookie" in content


def test_link_admin__exact_search__finds_either_side(admin_client, subject_types):
    link(("cookie", "c-81"), ("user", "u-1"))
    link(("cookie", "c-82"), ("user", "u-2"))

    response = admin_client.get(CHANGELIST, {"q": "c-81"})

    content = response.content.decode()
    assert "u-1" in content
    assert "u-2" not in content


def test_link_admin__search__is_case_sensitive_like_subject_ids(admin_client, subject_types):
    link(("cookie", "C-81"), ("user", "u-1"))
    link(("cookie", "c-81"), ("user", "u-2"))

    response = admin_client.get(CHANGELIST, {"q": "c-81"})

    rows = response.context["cl"].result_list
    assert [{row.subject_id_a, row.subject_id_b} for row in rows] == [{"c-81", "u-2"}]


def test_link_admin__link_page__shows_connected_identifiers_read_only(admin_client, subject_types):
    # Given: device - cookie c-1 - user - cookie c-2, and an unrelated pair
    link(("device", "d-1"), ("cookie", "c-1"))
    link(("cookie", "c-1"), ("user", "u-1"))
    link(("user", "u-1"), ("cookie", "c-2"))
    link(("user", "other"), ("cookie", "c-9"))
    row = IdentifierLink.objects.get(subject_id_b="d-1")

    # When
    response = admin_client.get(f"{CHANGELIST}{row.pk}/change/")

    # Then
    assert response.status_code == 200
    content = response.content.decode()
    assert "<p>From Cookie: <bdi>c-1</bdi></p>" in content
    assert "device: <bdi>d-1</bdi> <small>(1 link away)</small>" in content
    assert "user: <bdi>u-1</bdi> <small>(1 link away)</small>" in content
    assert "Cookie: <bdi>c-2</bdi> <small>(2 links away)</small>" in content
    assert "c-9" not in content
    assert "Truncated" not in content
    assert 'name="_save"' not in content


# Each request in its own transaction, as served: on Citus, one transaction cannot read every
# shard of the links (the list) and then the coordinator's local copy of a reference table (the page).
@pytest.mark.django_db(transaction=True)
def test_link_admin__subject_ids_with_overrides__each_isolated_in_a_bdi_on_the_list_and_the_page(
    admin_client, subject_types
):
    # Given a link whose both IDs hold bidirectional controls and a line separator
    cookie, user = "c\u202e-81\u2028", "u\u2066-1\u202d"
    link(("cookie", cookie), ("user", user))
    row = IdentifierLink.objects.get()

    listing = admin_client.get(CHANGELIST).content.decode()
    page = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()

    # Then each is shown only inside a <bdi>, and the title isolates them (U+2068 ... U+2069)
    for subject_id in (cookie, user):
        assert listing.count(subject_id) == listing.count(f"<bdi>{subject_id}</bdi>") == 1
        assert f"<bdi>{subject_id}</bdi>" in page
    assert f"<title>{row} |" in page
    assert f"\u2068{cookie}\u2069" in str(row) and f"\u2068{user}\u2069" in str(row)


@pytest.mark.parametrize("path", ["add/", "{pk}/delete/"])
def test_link_admin__add_or_delete__forbidden(admin_client, subject_types, path):
    link(("cookie", "c-1"), ("user", "u-1"))
    pk = IdentifierLink.objects.get().pk

    response = admin_client.get(CHANGELIST + path.format(pk=pk))

    assert response.status_code == 403


def test_link_admin__change_post__refused_and_nothing_changes(admin_client, subject_types):
    link(("cookie", "c-1"), ("user", "u-1"))
    row = IdentifierLink.objects.get()

    response = admin_client.post(f"{CHANGELIST}{row.pk}/change/", {"subject_id_a": "changed"})

    assert response.status_code == 403
    assert IdentifierLink.objects.get().subject_id_a == "u-1"


@pytest.mark.postgres
def test_estimated_count_paginator__big_list__planner_estimate_small_list_exact(db):
    # Given: more links than the threshold, analysed, then some deleted without re-analysing
    subject_type = SubjectTypeFactory()
    IdentifierLink.objects.bulk_create(
        IdentifierLinkFactory.build_batch(ESTIMATE_ABOVE_ROWS + 500, subject_type_a=subject_type), batch_size=2000
    )
    analyze_links()
    try:
        IdentifierLink.objects.filter(pk__in=IdentifierLink.objects.order_by("pk").values("pk")[:100]).delete()

        # When
        unfiltered = EstimatedCountPaginator(IdentifierLink.objects.order_by("-pk"), 100).count
        filtered_big = EstimatedCountPaginator(
            IdentifierLink.objects.filter(subject_type_a=subject_type).order_by("-pk"), 100
        ).count
        last = IdentifierLink.objects.order_by("-pk").first()
        filtered_small = EstimatedCountPaginator(
            IdentifierLink.objects.filter(subject_type_a=subject_type, subject_id_a=last.subject_id_a).order_by("-pk"),
            100,
        ).count

        # Then: big lists, filtered or not, are sized by the statistics (which still count the
        # deleted rows); a list the planner expects to be small is counted exactly. On Citus
        # the estimate is one shard's times the number of shards: near, not equal.
        analysed = pytest.approx(ESTIMATE_ABOVE_ROWS + 500, rel=0.15 if assignments_distributed() else 0)
        assert unfiltered == analysed
        assert filtered_big == analysed
        assert filtered_small == 1
    finally:
        # ANALYZE writes its statistics outside the test's transaction: leave them as they were.
        IdentifierLink.objects.all().delete()
        analyze_links()


def test_estimated_count_paginator__small_table__exact_count(subject_types):
    link(("cookie", "c-1"), ("user", "u-1"))
    link(("cookie", "c-2"), ("user", "u-1"))

    assert EstimatedCountPaginator(IdentifierLink.objects.order_by("-pk"), 100).count == 2
