"""assignments/console/previews.py: what the API would answer a subject now, storing nothing: the staff console's
previews, with the subject's holdout memberships and layer slots."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from assignments import gates
from assignments.configuration.resources import time_text
from assignments.console.previews import EXPERIMENT_NOT_ACTIVE, holdout_memberships, layer_slots, subject_preview
from assignments.models import Assignment, Experiment, SubjectType
from assignments.selectors import subject_types_active_steps
from idlinks.services import Identifier, id_link_create
from tests.helpers.assignments import assigned_store, reference_slot, reference_variant
from tests.helpers.resources import apply_resources, experiment, holdout, in_layer, layer, subject_type

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
        id_link_create(
            first=Identifier("user", "u-1"),
            second=Identifier("cookie", cookie),
            subject_types_active=subject_types_active_steps,
        )

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


# Gates 2 and 3: holdouts and layers

SUBJECTS = [f"u-{n}" for n in range(80)]


def api_answer(api, experiment_key: str, subject_ids: list[str]) -> dict:
    response = api.post("/experiment-assignments", {"experiment_id": experiment_key, "subject_ids": subject_ids})
    assert response.status_code == 200, response.content
    return json.loads(response.content)


def test_subject_preview__covered_by_a_holdout__held_out_members_excluded_as_the_api_then_answers(db, api):
    # Given an experiment covered by an active holdout of half of the users, and an ended one that stops nobody
    apply_resources(
        USER, holdout("h1", share=0.5), holdout("h0", status="ended"), experiment("checkout", holdouts=["h1", "h0"])
    )

    # When each subject is previewed
    previews = {subject_id: preview("checkout", subject_id, {}) for subject_id in SUBJECTS}

    # Then nothing was stored, and the API answers each as its preview said, storing the memberships it showed
    assert not Assignment.objects.exists()
    answer = api_answer(api, "checkout", SUBJECTS)
    assert {s: p.answer for s, p in previews.items()} == answer["assignments"]
    assert {s: p.reason for s, p in previews.items() if p.reason} == answer["excluded"]
    assert set(answer["excluded"].values()) == {gates.HELD_OUT}
    memberships = dict(Assignment.objects.filter(experiment__key="h1").values_list("subject_id", "variant__key"))
    assert {s: [(m.holdout, m.variant) for m in p.memberships] for s, p in previews.items()} == {
        s: [("h1", memberships[s])] for s in SUBJECTS
    }
    assert all(m.stored is None for p in previews.values() for m in p.memberships)
    held = next(p for p in previews.values() if p.reason)
    assert held.summary.startswith("Excluded (held_out): it is a held_out member of h1. The API answers the control")
    assert held.summary.endswith(
        "nothing is stored but its membership of h1 (held_out), drawn by the holdout's formula."
    )


def test_subject_preview__stored_membership__decides_rather_than_the_formula(db):
    # Given a subject whom the formula puts in general, stored as held_out (as a request before a share change
    # of the draft could have)
    apply_resources(USER, holdout("h1", share=0.5), experiment("checkout", holdouts=["h1"]))
    subject_id = next(
        s for s in SUBJECTS if reference_variant("h1", s, [("held_out", 0.5), ("general", 0.5)]) == "general"
    )
    assigned_store("h1", subject_id, "held_out")

    result = preview("checkout", subject_id, {})

    assert (result.answer, result.reason) == ("control", gates.HELD_OUT)
    (membership,) = result.memberships
    assert (membership.variant, membership.held_out, membership.stored.variant.key) == ("held_out", True, "held_out")
    assert result.summary.endswith("The API answers the control, control; nothing is stored.")


def test_subject_preview__in_a_layer__outside_its_slots_excluded_naming_the_owner_as_the_api_then_answers(db, api):
    apply_resources(
        USER,
        layer("flow"),
        experiment("left", layer=in_layer("flow", [0, 5000])),
        experiment("right", layer=in_layer("flow", [5000, 10000])),
    )

    previews = {subject_id: preview("left", subject_id, {}) for subject_id in SUBJECTS}

    answer = api_answer(api, "left", SUBJECTS)
    assert {s: p.answer for s, p in previews.items()} == answer["assignments"]
    assert {s: p.reason for s, p in previews.items() if p.reason} == answer["excluded"]
    assert {s: p.slot.slot for s, p in previews.items()} == {s: reference_slot("flow", s) for s in SUBJECTS}
    outside = next(p for p in previews.values() if p.reason)
    assert outside.reason == gates.LAYER_EXCLUDED
    assert (
        f"its slot {outside.slot.slot} of layer flow is not among the experiment's slots 0 to 4999: "
        "active experiment right owns it" in outside.summary
    )


def test_subject_preview__winner_declared_and_a_holdout__held_out_members_get_the_control_as_the_api_answers(db, api):
    apply_resources(USER, holdout("h1", share=0.5), experiment("checkout", holdouts=["h1"]))
    apply_resources(
        USER, holdout("h1", share=0.5), experiment("checkout", status="winner_declared", winning_variant="green")
    )

    previews = {subject_id: preview("checkout", subject_id, {}) for subject_id in SUBJECTS}

    answer = api_answer(api, "checkout", SUBJECTS)
    assert {s: p.answer for s, p in previews.items()} == answer["assignments"]
    assert {s: p.reason for s, p in previews.items() if p.reason} == answer["excluded"]
    assert set(answer["excluded"].values()) == {gates.HELD_OUT}


def test_holdout_memberships__every_holdout_of_the_type__stored_by_formula_or_none(db):
    apply_resources(
        USER,
        subject_type("device"),
        holdout("a-stored", share=0.5),
        holdout("b-formula", share=0.5),
        holdout("c-draft", status="draft"),
        holdout("d-ended", status="ended"),
        holdout("e-devices", subject_type="device"),
    )
    assigned_store("a-stored", "u-1", "held_out")
    stored = list(Assignment.objects.select_related("variant"))

    memberships = holdout_memberships(subject_type=SubjectType.objects.get(key="user"), subject_id="u-1", stored=stored)

    formula = reference_variant("b-formula", "u-1", [("held_out", 0.5), ("general", 0.5)])
    assert [(m.holdout, m.status, m.variant, m.held_out, m.stored is not None) for m in memberships] == [
        ("a-stored", "active", "held_out", True, True),
        ("b-formula", "active", formula, formula == "held_out", False),
        ("c-draft", "draft", None, False, False),
        ("d-ended", "ended", None, False, False),
    ]


def test_layer_slots__every_layer_of_the_type__its_slot_and_its_owner_now(db):
    apply_resources(
        USER,
        layer("flow"),
        layer("empty"),
        experiment("left", layer=in_layer("flow", [0, 5000])),
        experiment("right", layer=in_layer("flow", [5000, 10000])),
    )

    slots = layer_slots(subject_type=SubjectType.objects.get(key="user"), subject_id="u-1")

    owner = "left" if reference_slot("flow", "u-1") < 5000 else "right"
    assert [(s.layer, s.slot, s.owner) for s in slots] == [
        ("empty", reference_slot("empty", "u-1"), None),
        ("flow", reference_slot("flow", "u-1"), owner),
    ]
