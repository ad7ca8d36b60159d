"""assignments/console/admin/assignments.py: the subject lookup, and the assignment list, search and page."""

from __future__ import annotations

import csv
import io
import os

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.models import Assignment, Experiment, SubjectType
from tests.factories import AssignmentFactory, IdentifierLinkFactory
from tests.helpers import resources
from tests.helpers.admin import IN_DE, USER_WITH_ATTRIBUTES, assign, text_of, variant
from tests.helpers.resources import apply_resources

# Subject lookup


def test_subject_lookup__assignments_and_linked_identifiers_with_theirs(staff_client, configured):
    # Given user u-1 in checkout, linked to cookie c-1 (in banner) and, through it, to cookie c-2
    user, cookie = SubjectType.objects.get(key="user"), SubjectType.objects.get(key="cookie")
    a = AssignmentFactory(experiment=configured["checkout"], subject_id="u-1", variant=variant(configured["checkout"]))
    b = AssignmentFactory(experiment=configured["banner"], subject_id="c-1")
    AssignmentFactory(experiment=configured["checkout"], subject_id="U-1")  # another subject: IDs are case-sensitive
    IdentifierLinkFactory(subject_type_a=user, subject_id_a="u-1", subject_type_b=cookie, subject_id_b="c-1")
    IdentifierLinkFactory(subject_type_a=cookie, subject_id_a="c-1", subject_type_b=cookie, subject_id_b="c-2")

    # When staff look up u-1
    page = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1"})

    # Then they see its assignment and its connected identifiers with theirs, each linking to its record
    lookup = page.context["lookup"]
    assert [x.pk for x in lookup.assignments] == [a.pk]
    assert [(x.identifier.subject_id, x.identifier.distance) for x in lookup.linked] == [("c-1", 1), ("c-2", 2)]
    assert [x.pk for x in lookup.linked[0].assignments] == [b.pk]
    content = page.content.decode()
    assert f"/admin/assignments/assignment/{a.pk}/change/" in content
    assert f"/admin/assignments/assignment/{b.pk}/change/" in content
    assert "/admin/idlinks/identifierlink/?q=c-2" in content

    # And with depth 1, only the direct link
    near = staff_client.get(
        "/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1", "depth": "1"}
    )
    assert [x.identifier.subject_id for x in near.context["lookup"].linked] == ["c-1"]


def test_subject_id_with_override_and_line_separator__answered_and_exported_exactly_isolated_on_the_pages(
    api, staff_client, configured
):
    # Given a subject ID holding a right-to-left override and a line separator (no control characters)
    subject = "u\u202e-1\u2028x"

    # When the API assigns it
    response = api.post("/experiment-assignments", {"experiment_id": "checkout", "subject_ids": [subject]})

    # Then it is accepted and answered exactly, and exported exactly
    assert response.status_code == 200
    assert list(response.json()["assignments"]) == [subject]
    exported = io.StringIO()
    call_command("export_assignments", "--experiment", "checkout", stdout=exported)
    assert [row[1] for row in csv.reader(io.StringIO(exported.getvalue(), newline=""))] == ["subject_id", subject]

    # And every page shows it in a <bdi> (besides the lookup form's own input), the page title isolated
    lookup = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": subject})
    listing = staff_client.get("/admin/assignments/assignment/")
    assignment = Assignment.objects.get(subject_id=subject)
    page = staff_client.get(f"/admin/assignments/assignment/{assignment.pk}/change/")
    isolated = f"<bdi>{subject}</bdi>"
    assert f"user: {isolated}</h2>" in lookup.content.decode()
    assert lookup.content.decode().count(subject) == 1 + lookup.content.decode().count(f'value="{subject}"')
    assert listing.content.decode().count(subject) == listing.content.decode().count(isolated) == 1
    assert isolated in page.content.decode()
    assert f"\u2068{subject}\u2069 in checkout: " in page.content.decode()


def test_subject_lookup__bad_depth__form_error(staff_client, configured):
    page = staff_client.get(
        "/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1", "depth": "9"}
    )

    assert page.context["lookup"] is None
    assert "depth" in page.context["form"].errors


def test_subject_lookup__unknown_subject_type__form_error(staff_client, configured):
    page = staff_client.get(
        "/admin/assignments/assignment/lookup/", {"subject_type": "no-such-type", "subject_id": "u-1"}
    )

    assert page.context["lookup"] is None
    assert "subject_type" in page.context["form"].errors


def test_lists__link_to_subject_lookup(staff_client, configured):
    for path in ("/admin/assignments/assignment/", "/admin/idlinks/identifierlink/"):
        assert "/admin/assignments/assignment/lookup/" in staff_client.get(path).content.decode()


# The assignment list


def test_assignment_search__exact_subject_id__finds_only_that_subject(staff_client, configured):
    experiment = configured["checkout"]
    AssignmentFactory(experiment=experiment, subject_id="User-1")
    AssignmentFactory(experiment=experiment, subject_id="user-1")
    AssignmentFactory(experiment=experiment, subject_id="User-10")

    response = staff_client.get("/admin/assignments/assignment/", {"q": "User-1"})

    assert [row.subject_id for row in response.context["cl"].result_list] == ["User-1"]


# On Citus committed between steps, as pages and writes are in production: there one
# transaction cannot both write reference tables on the coordinator and then EXPLAIN the
# shards through other connections. Only there: SQLite's in-memory test database then fails to flush.
@pytest.mark.django_db(transaction=os.environ.get("TEST_CITUS") == "1")
def test_assignment_list__queries__same_for_few_and_many_rows(staff_client, configured):
    assign(configured["checkout"], "control", 3)
    assign(configured["banner"], "wide", 80)
    with CaptureQueriesContext(connection) as few:
        staff_client.get(f"/admin/assignments/assignment/?experiment__id__exact={configured['checkout'].pk}")
    with CaptureQueriesContext(connection) as many:
        staff_client.get(f"/admin/assignments/assignment/?experiment__id__exact={configured['banner'].pk}")

    assert len(many) == len(few)


def test_assignment_page__title_names_experiment_and_variant(staff_client, configured):
    assignment = AssignmentFactory(
        experiment=configured["checkout"], subject_id="u-9", variant=variant(configured["checkout"])
    )

    page = staff_client.get(f"/admin/assignments/assignment/{assignment.pk}/change/")

    # The subject ID isolated (U+2068 ... U+2069), so that no character in it can reorder the rest
    assert "\u2068u-9\u2069 in checkout: green" in text_of(page)


def test_assignments__cannot_be_added_or_deleted_in_the_admin(staff_client, configured):
    assignment = AssignmentFactory(experiment=configured["checkout"])

    assert staff_client.get("/admin/assignments/assignment/add/").status_code == 403
    assert staff_client.post(f"/admin/assignments/assignment/{assignment.pk}/delete/").status_code == 403
    assert Assignment.objects.count() == 1


def test_assignment_list__filtered_by_experiment__newest_first_by_time(staff_client, configured):
    checkout = configured["checkout"]
    assign(checkout, "control", 2, days_ago=3, prefix="old")
    assign(checkout, "green", 2, days_ago=0, prefix="new")
    assign(configured["banner"], "wide", 2, days_ago=1)

    response = staff_client.get("/admin/assignments/assignment/", {"experiment__id__exact": checkout.pk})

    rows = response.context["cl"].result_list
    assert [row.subject_id.split("-")[0] for row in rows] == ["new", "new", "old", "old"]
    assert str(response.context["cl"].result_list.query).endswith(
        'ORDER BY "assignments_assignment"."created_at" DESC, "assignments_assignment"."id" DESC'
    )


def test_subject_lookup__running_experiments__stored_decided_or_depending_on_attributes(staff_client, db):
    # Given experiments of every kind on user, and u-1 stored in one of them
    past = "2026-01-01T00:00:00Z"
    apply_resources(
        USER_WITH_ATTRIBUTES,
        resources.experiment("a-stored", coverage=0.0),
        resources.experiment("b-closed", enrollment={"stopAt": past}, targeting=IN_DE),
        resources.experiment("c-targeted", targeting=[*IN_DE, {"attribute": "plan", "exists": True}]),
        resources.experiment("d-nobody", coverage=0.0),
        resources.experiment("e-winner", status="winner_declared", winning_variant="green"),
        resources.experiment("f-ended", status="ended"),
        resources.experiment("g-draft", status="draft"),
    )
    stored = Experiment.objects.get(key="a-stored")
    AssignmentFactory(experiment=stored, subject_id="u-1", variant=variant(stored))

    # When staff look up u-1
    page = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1"})

    # Then each running experiment says what it would answer, and why
    previews = page.context["previews"]
    assert [(p.experiment.key, p.answer, p.reason, p.depends_on) for p in previews] == [
        ("a-stored", "green", None, ()),
        ("b-closed", "control", "enrollment_closed", ()),
        ("c-targeted", None, None, ("country", "plan")),
        ("d-nobody", "control", "outside_coverage", ()),
        ("e-winner", "green", None, ()),
    ]
    text = text_of(page)
    assert "depends on attributes: country, plan" in text
    assert "its enrollment window has closed: it closed at 2026-01-01 00:00 UTC" in text
    assert not Assignment.objects.exclude(experiment=stored).exists()
