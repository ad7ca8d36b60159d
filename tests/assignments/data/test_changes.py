"""GET /changes and assignments/data/changes.py: every change to stored assignments and links, from a cursor
on, each once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings
from django.utils import timezone

from assignments.data.change_log import changes_prune
from assignments.data.deleting import assignments_delete
from assignments.data.forcing import assignments_force
from assignments.models import Assignment, AssignmentChange, ChangeMark, Experiment
from tests.factories import ExperimentFactory, SubjectTypeFactory
from tests.helpers.api import ApiClient, assert_one_invalid_field, assert_problem
from tests.helpers.changes import FEED_DB, feed_read
from tokens.models import Role
from tokens.services import api_token_create

pytestmark = FEED_DB

COOKIE_USER = [{"subject_type": "cookie", "subject_id": "c-81"}, {"subject_type": "user", "subject_id": "u-1"}]


@pytest.fixture
def admin_api() -> ApiClient:
    return ApiClient(api_token_create(name="feed-admin", role=Role.ADMIN)[1])


@pytest.fixture
def checkout() -> Experiment:
    SubjectTypeFactory(key="cookie")
    return ExperimentFactory(
        key="Checkout-Button", subject_type=SubjectTypeFactory(key="user"), splits=[("control", 0.5), ("green", 0.5)]
    )


def assign(api: ApiClient, *subject_ids: str, experiment: str = "Checkout-Button") -> dict:
    response = api.post("/experiment-assignments", {"experiment_id": experiment, "subject_ids": list(subject_ids)})
    assert response.status_code == 200, response.content
    return response.json()["assignments"]


def test_a_new_assignment_and_a_link_are_served_in_the_documented_shape(admin_api, checkout):
    assigned = assign(admin_api, "u-1")
    assert admin_api.post("/id-link", {"identifiers": COOKIE_USER}).status_code == 200

    body = admin_api.get("/changes").json()

    created, linked = body["changes"]
    stored = Assignment.objects.get(subject_id="u-1")
    assert created == {
        "cursor": created["cursor"],
        "kind": "assignment.created",
        "recorded_at": created["recorded_at"],
        "assignment": {
            "experiment_id": "Checkout-Button",
            "subject_id": "u-1",
            "variant_id": assigned["u-1"],
            "cohort": 1,
            "created_at": stored.created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "source": "hashed",
        },
    }
    assert linked["kind"] == "link.created"
    assert linked["link"] == {
        "subject_type_a": "cookie",
        "subject_id_a": "c-81",
        "subject_type_b": "user",
        "subject_id_b": "u-1",
        "created_at": linked["link"]["created_at"],
    }
    assert body["next"] == linked["cursor"]
    for change in body["changes"]:
        recorded = dt.datetime.fromisoformat(change["recorded_at"])
        assert abs(timezone.now() - recorded) < dt.timedelta(minutes=1)
        assert change["cursor"].isascii() and len(change["cursor"]) <= 100


def test_following_next_reads_every_change_once_and_then_nothing(admin_api, checkout):
    assign(admin_api, *(f"u-{n}" for n in range(7)))
    first = admin_api.get("/changes?limit=3").json()
    second = admin_api.get(f"/changes?after={first['next']}&limit=3").json()
    third = admin_api.get(f"/changes?after={second['next']}&limit=3").json()
    last = admin_api.get(f"/changes?after={third['next']}").json()

    subjects = [change["assignment"]["subject_id"] for page in (first, second, third) for change in page["changes"]]
    assert sorted(subjects) == [f"u-{n}" for n in range(7)]
    assert [len(page["changes"]) for page in (first, second, third, last)] == [3, 3, 1, 0]
    assert last["next"] == third["next"]


def test_without_a_cursor_and_with_nothing_stored_next_reads_on_from_there(admin_api, checkout):
    empty = admin_api.get("/changes").json()
    assert empty["changes"] == []
    assign(admin_api, "u-1")
    assert [change["assignment"]["subject_id"] for change in feed_read(admin_api, empty["next"])] == ["u-1"]


def test_every_source_is_a_creation(admin_api, checkout):
    assign(admin_api, "u-1")
    assignments_force(experiment=checkout, variant_id="green", subject_ids=["qa-1"], reason="QA", replace=False)
    assigned_store_imported(checkout, "old-1")

    changes = feed_read(admin_api)

    assert {(c["kind"], c["assignment"]["subject_id"], c["assignment"]["source"]) for c in changes} == {
        ("assignment.created", "u-1", "hashed"),
        ("assignment.created", "qa-1", "forced"),
        ("assignment.created", "old-1", "imported"),
    }


def assigned_store_imported(experiment: Experiment, subject_id: str) -> None:
    """A row imported with a created_at months back, as import_assignments writes it."""
    Assignment.objects.create(
        experiment=experiment,
        subject_id=subject_id,
        variant=experiment.variants.get(key="control"),
        cohort=1,
        source=Assignment.Source.IMPORTED,
        created_at=timezone.now() - dt.timedelta(days=200),
    )


def test_a_replacement_is_served_after_the_creation_it_replaces(admin_api, checkout):
    assignments_force(experiment=checkout, variant_id="control", subject_ids=["qa-1"], reason="QA", replace=False)
    before = admin_api.get("/changes").json()
    assignments_force(experiment=checkout, variant_id="green", subject_ids=["qa-1"], reason="again", replace=True)

    from_start = feed_read(admin_api)
    from_before = feed_read(admin_api, before["next"])

    assert [(c["kind"], c["assignment"]["variant_id"]) for c in from_start] == [
        ("assignment.created", "control"),
        ("assignment.replaced", "green"),
    ]
    assert [(c["kind"], c["assignment"]["variant_id"]) for c in from_before] == [("assignment.replaced", "green")]
    assert from_start[0]["cursor"] == before["changes"][0]["cursor"]


def test_a_deletion_is_served_with_the_row_as_it_was(admin_api, checkout):
    assigned = assign(admin_api, "u-1", "u-2")
    before = admin_api.get("/changes").json()
    Experiment.objects.filter(pk=checkout.pk).update(status=Experiment.Status.ENDED)
    assert assignments_delete(experiment=checkout, batch_size=1) == 2

    from_start = feed_read(admin_api)
    from_before = feed_read(admin_api, before["next"])

    assert [c["kind"] for c in from_start] == ["assignment.created"] * 2 + ["assignment.deleted"] * 2
    assert from_start[:2] == before["changes"]
    assert {c["assignment"]["subject_id"]: c["assignment"]["variant_id"] for c in from_before} == assigned
    assert [c["kind"] for c in from_before] == ["assignment.deleted"] * 2
    assert AssignmentChange.objects.filter(rank=AssignmentChange.Rank.CREATED).count() == 2


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("limit=0", "limit", "must be a whole number from 1 to 10000"),
        ("limit=10001", "limit", "must be a whole number from 1 to 10000"),
        ("limit=1.5", "limit", "must be a whole number from 1 to 10000"),
        ("limit=ten", "limit", "must be a whole number from 1 to 10000"),
        ("after=c1.zz.0.1", "after", "is not a cursor of this service"),
        ("after=c1.ffffffffffffffff.0.1", "after", "is not a cursor of this service"),
        ("after=" + "c" * 101, "after", "is not a cursor of this service"),
        ("after=", "after", "must be a cursor, not empty"),
    ],
)
def test_a_malformed_query_is_refused(admin_api, checkout, query, field, message):
    assert_one_invalid_field(admin_api.get(f"/changes?{query}"), field, message)


def test_only_admin_tokens_read_the_feed(api, anonymous_api, checkout):
    assert_problem(api.get("/changes"), status=403, code="permission_denied")
    assert_problem(anonymous_api.get("/changes"), status=401, code="not_authenticated")


def test_a_cursor_older_than_the_retention_is_gone_and_the_feed_starts_after_it(admin_api, checkout):
    assign(admin_api, "u-1")
    old = admin_api.get("/changes").json()
    assignments_force(experiment=checkout, variant_id="control", subject_ids=["qa-1"], reason="QA", replace=False)
    assignments_force(experiment=checkout, variant_id="green", subject_ids=["qa-1"], reason="QA", replace=True)
    with override_settings(CHANGES_RETENTION_DAYS=0):
        assert changes_prune() == 2
        assign(admin_api, "u-2")

        assert_problem(admin_api.get(f"/changes?after={old['next']}"), status=410, code="cursor_expired")
        kept = feed_read(admin_api)

    assert [c["assignment"]["subject_id"] for c in kept] == ["u-2"]
    assert AssignmentChange.objects.count() == 0
    assert ChangeMark.objects.count() == 1
    # A longer retention set afterwards does not bring back what was dropped.
    assert_problem(admin_api.get(f"/changes?after={old['next']}"), status=410, code="cursor_expired")


def test_a_cursor_after_which_nothing_was_dropped_does_not_expire(admin_api, checkout):
    assign(admin_api, "u-1")
    quiet = admin_api.get("/changes").json()["next"]
    with override_settings(CHANGES_RETENTION_DAYS=0):
        changes_prune()
        changes_prune()
        assert admin_api.get(f"/changes?after={quiet}").json() == {"changes": [], "next": quiet}
    assign(admin_api, "u-2")
    changes_prune()

    assert [c["assignment"]["subject_id"] for c in feed_read(admin_api, quiet)] == ["u-2"]
