"""What the API would answer a subject now, storing nothing: the staff console's previews."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from assignments import gates
from assignments.models import Assignment, Experiment
from assignments.previews import EXPERIMENT_NOT_ACTIVE, subject_preview
from assignments.resources import time_text
from idlinks.services import Identifier, id_link_create
from tests.helpers.assignments import assigned_store
from tests.helpers.resources import apply_resources, experiment, subject_type

USER = subject_type("user", attributes={"country": "string", "plan": "string"})
IN_DE = [{"attribute": "country", "in": ["DE"]}]


def preview(experiment_key: str, subject_id: str, attributes=None):
    return subject_preview(
        experiment=Experiment.objects.get(key=experiment_key), subject_id=subject_id, attributes=attributes
    )


def test_subject_preview__many_subjects__says_what_the_api_then_answers_and_stores_nothing(db, api):
    # Given an experiment targeting country DE at 50 % coverage, and subjects sending DE, FR or nothing
    apply_resources(USER, experiment("checkout", targeting=IN_DE, coverage=0.5))
    sent = {f"u-{n}": [{"country": "DE"}, {"country": "FR"}, None][n % 3] for n in range(90)}

    # When each is previewed
    previews = {
        subject_id: preview("checkout", subject_id, attributes or {}) for subject_id, attributes in sent.items()
    }

    # Then nothing was stored, and the API answers each exactly as its preview said
    assert not Assignment.objects.exists()
    response = api.post(
        "/experiment-assignments",
        {
            "experiment_id": "checkout",
            "subject_ids": list(sent),
            "attributes": {subject_id: attributes for subject_id, attributes in sent.items() if attributes},
        },
    )
    answer = json.loads(response.content)
    assert {s: p.answer for s, p in previews.items()} == answer["assignments"]
    assert {s: p.reason for s, p in previews.items() if p.reason} == answer["excluded"]
    assert set(answer["excluded"].values()) == {gates.ATTRIBUTES_MISSING, gates.NOT_TARGETED, gates.OUTSIDE_COVERAGE}


def test_subject_preview__stored_assignment_and_coverage_now_0__the_stored_one(db):
    apply_resources(USER, experiment("checkout"))
    assigned_store("checkout", "u-1", "green")
    apply_resources(USER, experiment("checkout", coverage=0.0))

    result = preview("checkout", "u-1", {})

    assert (result.answer, result.reason, result.stored.variant.key) == ("green", None, "green")
    assert "stored assignment, green, is the answer" in result.summary


def test_subject_preview__enrollment_not_started__reason_and_its_time_in_words(db):
    start = timezone.now() + timedelta(days=2)
    apply_resources(USER, experiment("checkout", enrollment={"startAt": time_text(start)}))

    result = preview("checkout", "u-1", {})

    assert (result.answer, result.reason) == ("control", gates.ENROLLMENT_NOT_STARTED)
    assert f"it opens at {start:%Y-%m-%d %H:%M}" in result.summary
    assert "The API answers the control, control; nothing is stored." in result.summary


def test_subject_preview__attributes_unknown_and_targeting__depends_on_them(db):
    apply_resources(USER, experiment("checkout", targeting=[*IN_DE, {"attribute": "plan", "exists": True}]))

    result = preview("checkout", "u-1", None)

    assert (result.answer, result.reason, result.depends_on) == (None, None, ("country", "plan"))
    assert result.summary.startswith("Depends on attributes: country, plan. If the targeting lets it in: Enters with")


def test_subject_preview__linked_identifier_assigned__carried_over_past_coverage_0_and_nothing_stored(db):
    # Given cookie c-1 assigned green in an experiment that follows links and now covers nobody
    apply_resources(
        USER, subject_type("cookie"), experiment("banner", subject_type="cookie", follow_links=True, coverage=0.0)
    )
    assigned_store("banner", "c-1", "green")
    for cookie in ("c-1", "c-2"):
        id_link_create(first=Identifier("user", "u-1"), second=Identifier("cookie", cookie))

    # When c-2, linked to it through u-1, and c-3, linked to nothing, are previewed
    linked, alone = preview("banner", "c-2", {}), preview("banner", "c-3", {})

    # Then c-2 would carry green over, c-3 is outside the coverage, and nothing more is stored
    assert (linked.answer, linked.reason) == ("green", None)
    assert "carried over from a linked identifier (source linked, cohort 1)" in linked.summary
    assert (alone.answer, alone.reason) == ("control", gates.OUTSIDE_COVERAGE)
    assert Assignment.objects.count() == 1


@pytest.mark.parametrize(
    ("attributes", "answer", "reason"),
    [({"country": "DE"}, "green", None), ({"country": "FR"}, "control", gates.NOT_TARGETED), (None, None, None)],
)
def test_subject_preview__winner_declared__winner_for_the_targeted_control_for_others(db, attributes, answer, reason):
    apply_resources(USER, experiment("checkout", status="winner_declared", winning_variant="green", targeting=IN_DE))

    result = preview("checkout", "u-1", attributes)

    assert (result.answer, result.reason) == (answer, reason)
    assert "nothing is stored" in result.summary.lower()


@pytest.mark.parametrize("status", ["draft", "ended", "archived"])
def test_subject_preview__not_active__409_said_and_a_stored_one_kept_for_the_page(db, status):
    apply_resources(USER, experiment("checkout", status=status if status == "draft" else "active"))
    if status != "draft":
        assigned_store("checkout", "u-1", "green")
        apply_resources(USER, experiment("checkout", status=status))

    result = preview("checkout", "u-1", {})

    assert (result.answer, result.reason) == (None, EXPERIMENT_NOT_ACTIVE)
    assert (result.stored is None) == (status == "draft")
    assert f"The experiment is {status}: the API answers 409 experiment_not_active" in result.summary
