"""assignments/assigning.py: who enters an experiment and with which variant, through both assignment endpoints
(docs/explanation/population.md).

Attributes validated, excluded subjects answered with the control and never stored, stored assignments winning
over every later change of a gate, winners and following links; gates 2 and 3, holdouts and layers; and
concurrent requests for the same new subjects: one stored row each, every answer equal to it."""

from __future__ import annotations

import hashlib
import json
import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Count
from django.test import Client

from assignments.console.reports import experiment_report
from assignments.models import Assignment, Experiment
from tests.helpers.api import assert_problem, error_fields, request_statements
from tests.helpers.assignments import assigned_store, reference_slot, reference_variant
from tests.helpers.database import batch_reads
from tests.helpers.idlinks import link
from tests.helpers.observability import sample, samples
from tests.helpers.resources import apply_resources, experiment, holdout, in_layer, lab, layer, subject_type, variant
from tokens.models import Role
from tokens.services import api_token_create

ATTRIBUTES = {"country": "string", "plan": "string", "seats": "number", "appVersion": "version", "beta": "boolean"}
USER = subject_type("user", attributes=ATTRIBUTES)
COOKIE = subject_type("cookie", attributes={"country": "number"})
GERMAN_SPEAKING = [{"attribute": "country", "in": ["DE", "AT", "CH"]}]
SPLITS = [("control", 0.5), ("green", 0.5)]


def gated(key: str = "checkout-button", **gates) -> dict:
    return experiment(key, **gates)


def covered(salt: str, subject_id: str, coverage: float) -> bool:
    """The coverage gate written independently: bytes 8 to 15 of the digest against coverage * 2**64, exactly."""
    digest = hashlib.sha256((salt + ":" + subject_id).encode("utf-8")).digest()
    numerator, denominator = coverage.as_integer_ratio()
    return int.from_bytes(digest[8:16], "big") * denominator < numerator * 2**64


def stored(key: str = "checkout-button") -> dict[str, str]:
    return dict(Assignment.objects.filter(experiment__key=key).values_list("subject_id", "variant__key"))


def batch(api, subject_ids, attributes=None, key="checkout-button"):
    body = {"experiment_id": key, "subject_ids": subject_ids}
    if attributes is not None:
        body["attributes"] = attributes
    return api.post("/experiment-assignments", body)


def answered(response) -> dict:
    assert response.status_code == 200, response.content
    return json.loads(response.content)


def one(api, subject, attributes=None, **fields):
    body = {"subject": subject, **fields}
    if attributes is not None:
        body["attributes"] = attributes
    return api.post("/assignments", body)


# --- attributes: validated to the letter, before anything is stored ---


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        ({"u1": {"bad name": "x"}}, "attributes.u1.bad name"),
        ({"u1": {"9lives": "x"}}, "attributes.u1.9lives"),
        ({"u1": {"a" * 65: "x"}}, "attributes.u1." + "a" * 65),
        ({"u1": {"country": None}}, "attributes.u1.country"),
        ({"u1": {"country": ["DE"]}}, "attributes.u1.country"),
        ({"u1": {"country": {"code": "DE"}}}, "attributes.u1.country"),
        ({"u1": {"free": "x" * 257}}, "attributes.u1.free"),
        ({"u1": {"free": "a\u0007b"}}, "attributes.u1.free"),
        ({"u1": {f"k{index}": 1 for index in range(51)}}, "attributes.u1"),
        ({"u1": "DE"}, "attributes.u1"),
        ({"u2": {"country": "DE"}}, "attributes.u2"),
        (["u1"], "attributes"),
        # Declared types: each value must have its attribute's type.
        ({"u1": {"country": 49}}, "attributes.u1.country"),
        ({"u1": {"seats": "10"}}, "attributes.u1.seats"),
        ({"u1": {"seats": True}}, "attributes.u1.seats"),
        ({"u1": {"beta": "true"}}, "attributes.u1.beta"),
        ({"u1": {"appVersion": "2.x"}}, "attributes.u1.appVersion"),
        ({"u1": {"appVersion": 2}}, "attributes.u1.appVersion"),
    ],
)
def test_experiment_assignments__invalid_attributes__400_with_the_field_path_and_nothing_stored(api, attributes, field):
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))

    body = assert_problem(batch(api, ["u1"], attributes), status=400, code="invalid_request")

    assert error_fields(body) == [field]
    assert stored() == {}


def test_experiment_assignments__number_too_large_for_a_double__400(api):
    apply_resources(USER, gated())

    response = api.post(
        "/experiment-assignments",
        '{"experiment_id": "checkout-button", "subject_ids": ["u1"], "attributes": {"u1": {"seats": 1e400}}}',
    )

    assert error_fields(assert_problem(response, status=400, code="invalid_request")) == ["attributes.u1.seats"]


def test_experiment_assignments__undeclared_attributes_and_fifty_entries__accepted_and_ignored(api):
    apply_resources(USER, gated())
    attributes = {"u1": {**{f"extra_{index}": index for index in range(49)}, "country": "DE"}}

    assert answered(batch(api, ["u1"], attributes)) == {
        "assignments": {"u1": reference_variant("checkout-button", "u1", SPLITS)}
    }


def error_messages(body: dict) -> dict[str, str]:
    return {error["field"]: error["message"] for error in body["errors"]}


@pytest.mark.parametrize(
    ("path", "request_body", "messages"),
    [
        (
            "/experiment-assignments",
            {"experiment_id": "checkout-button", "subject_ids": ["u1"], "attributes": {"country": "DE"}},
            {
                "attributes.country": "must be an object of attribute names to values "
                '(here attributes are keyed by subject ID: {"u1": {"country": "DE"}})'
            },
        ),
        (
            "/assignments",
            {"subject": {"user": "u1"}, "attributes": {"u1": {"country": "DE"}}},
            {
                "attributes.u1": "must be a string, a finite number or a boolean "
                '(here attributes are one object for this subject: {"country": "DE"})'
            },
        ),
    ],
    ids=["experiment-assignments-sent-one-object", "assignments-sent-objects-keyed-by-subject-id"],
)
def test_attributes__in_the_other_endpoints_shape__400_told_the_shape_this_endpoint_wants(
    api, path, request_body, messages
):
    # Given a client that sends one endpoint's shape of attributes to the other
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))

    body = assert_problem(api.post(path, request_body), status=400, code="invalid_request")

    # Then the message names the shape this endpoint wants, with an example
    assert error_messages(body) == messages
    assert stored() == {}


def test_experiment_assignments__version_sent_as_a_number__told_to_send_a_string(api):
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))

    body = assert_problem(batch(api, ["u1"], {"u1": {"appVersion": 2.1}}), status=400, code="invalid_request")

    assert error_messages(body)["attributes.u1.appVersion"].endswith(
        'as the subject type declares; send it as a string ("2.1"): a number loses the zeros of 2.10'
    )


@pytest.mark.parametrize(
    ("attributes", "field"),
    [({"country": 49}, "attributes.country"), ({"seats": "x"}, "attributes.seats"), ("DE", "attributes")],
)
def test_assignments__invalid_attributes__400_with_the_field_path(api, attributes, field):
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))

    body = assert_problem(one(api, {"user": "u1"}, attributes), status=400, code="invalid_request")

    assert error_fields(body) == [field]
    assert stored() == {}


def test_assignments__attribute_declared_with_two_types__must_fit_every_subject_type_sent(api):
    # Given `country` a string for users and a number for cookies
    apply_resources(USER, COOKIE, gated(targeting=GERMAN_SPEAKING))

    # Then a subject known by both identifiers cannot send a country that fits both
    both = {"user": "u1", "cookie": "c1"}
    assert error_fields(assert_problem(one(api, both, {"country": "DE"}), status=400, code="invalid_request")) == [
        "attributes.country"
    ]
    # And one known by its user ID alone can
    assert answered(one(api, {"user": "u1"}, {"country": "DE"}))["assignments"] == {
        "checkout-button": reference_variant("checkout-button", "u1", SPLITS)
    }


# --- exclusions: the control, the reason, nothing stored ---


def test_experiment_assignments__targeting__excluded_get_the_control_with_the_reason_and_nothing_stored(api):
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))
    attributes = {"de": {"country": "DE"}, "fr": {"country": "FR"}, "ch": {"country": "CH", "seats": 3}}

    body = answered(batch(api, ["de", "fr", "none", "ch", "de"], attributes))

    assert body == {
        "assignments": {
            "de": reference_variant("checkout-button", "de", SPLITS),
            "fr": "control",
            "none": "control",
            "ch": reference_variant("checkout-button", "ch", SPLITS),
        },
        "excluded": {"fr": "not_targeted", "none": "attributes_missing"},
    }
    assert list(body["assignments"]) == ["de", "fr", "none", "ch"]
    assert stored() == {"de": body["assignments"]["de"], "ch": body["assignments"]["ch"]}


def test_experiment_assignments__nobody_excluded__body_byte_for_byte_as_without_gates(api):
    # Given the answer for two new subjects without gates
    apply_resources(USER, gated())
    attributes = {"u1": {"country": "DE"}, "u2": {"country": "AT"}}
    without = batch(api, ["u1", "u2"], attributes).content
    Assignment.objects.all().delete()

    # When they are asked for again as new subjects, with gates that let both in
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING, coverage=1.0))
    response = batch(api, ["u1", "u2"], attributes)

    # Then the body is the same bytes, with no `excluded` key
    assert response.content == without
    assert set(answered(response)) == {"assignments"}
    assert list(stored()) == ["u1", "u2"]


def test_experiment_assignments__coverage__exactly_the_subjects_the_independent_draw_covers_enter(api):
    apply_resources(USER, gated(coverage=0.3))
    subject_ids = [f"s-{index}" for index in range(1000)]

    body = answered(batch(api, subject_ids))

    inside = {subject_id for subject_id in subject_ids if covered("checkout-button", subject_id, 0.3)}
    assert 250 < len(inside) < 350
    assert body["excluded"] == {
        subject_id: "outside_coverage" for subject_id in subject_ids if subject_id not in inside
    }
    assert stored() == {subject_id: reference_variant("checkout-button", subject_id, SPLITS) for subject_id in inside}
    assert all(body["assignments"][subject_id] == "control" for subject_id in body["excluded"])


def test_experiment_assignments__window_not_started_and_closed__every_new_subject_excluded(api):
    now = datetime.now(UTC)
    apply_resources(USER, gated(enrollment={"startAt": (now + timedelta(days=1)).isoformat()}))
    assert answered(batch(api, ["u1"]))["excluded"] == {"u1": "enrollment_not_started"}

    apply_resources(USER, gated(enrollment={"stopAt": (now - timedelta(seconds=1)).isoformat()}))
    assert answered(batch(api, ["u1"]))["excluded"] == {"u1": "enrollment_closed"}

    apply_resources(
        USER,
        gated(
            enrollment={
                "startAt": (now - timedelta(days=1)).isoformat(),
                "stopAt": (now + timedelta(days=1)).isoformat(),
            }
        ),
    )
    assert "excluded" not in answered(batch(api, ["u1"]))
    assert list(stored()) == ["u1"]


def test_experiment_assignments__reasons__the_first_gate_in_order_names_it(api):
    # Given a window that has closed, targeting and coverage 0
    closed = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    apply_resources(USER, gated(enrollment={"stopAt": closed}, targeting=GERMAN_SPEAKING, coverage=0.0))
    assert answered(batch(api, ["u1"], {"u1": {"country": "FR"}}))["excluded"] == {"u1": "enrollment_closed"}

    # When the window is gone: targeting before coverage
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING, coverage=0.0))
    body = answered(batch(api, ["fr", "none", "de"], {"fr": {"country": "FR"}, "de": {"country": "DE"}}))
    assert body["excluded"] == {"fr": "not_targeted", "none": "attributes_missing", "de": "outside_coverage"}
    assert stored() == {}


def test_stored_assignment__any_later_change_of_the_gates__returned_unchanged(api):
    # Given u1 and u2 assigned while every gate was open, u2 under a variant the formula would not give it
    apply_resources(USER, gated())
    first = answered(batch(api, ["u1"]))["assignments"]
    assigned_store(
        "checkout-button",
        "u2",
        "green" if reference_variant("checkout-button", "u2", SPLITS) == "control" else "control",
    )
    kept = {**first, "u2": stored()["u2"]}
    closed = (datetime.now(UTC) - timedelta(hours=1)).isoformat()

    # When each gate in turn would now keep them out, then all at once
    for gates in ({"coverage": 0.0}, {"targeting": GERMAN_SPEAKING}, {"enrollment": {"stopAt": closed}}):
        apply_resources(USER, gated(**gates))
        # Then both are answered as stored, not excluded, through both endpoints
        assert answered(batch(api, ["u1", "u2"], {"u1": {"country": "FR"}})) == {"assignments": kept}
        for subject_id in ("u1", "u2"):
            assert answered(one(api, {"user": subject_id}, {"country": "FR"}))["assignments"] == {
                "checkout-button": kept[subject_id]
            }
    assert stored() == kept


def test_excluded_subject__gates_opened_later__enters_then(api):
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))
    assert answered(batch(api, ["u1"], {"u1": {"country": "FR"}}))["excluded"] == {"u1": "not_targeted"}

    apply_resources(USER, gated())

    assert answered(batch(api, ["u1"])) == {"assignments": {"u1": reference_variant("checkout-button", "u1", SPLITS)}}
    assert list(stored()) == ["u1"]


# --- POST /assignments: reasons in `unassigned`, in their order ---


def test_assignments__gate_reasons__in_unassigned_and_nothing_stored(api):
    apply_resources(
        USER,
        gated("coverage-none", coverage=0.0),
        gated("german", targeting=GERMAN_SPEAKING),
        gated("open"),
    )

    body = answered(one(api, {"user": "u1"}, {"country": "FR"}, experiments=["coverage-none", "german", "open"]))

    assert body == {
        "assignments": {"open": reference_variant("open", "u1", SPLITS)},
        "new_assignments": ["open"],
        "unassigned": {"coverage-none": "outside_coverage", "german": "not_targeted"},
    }
    assert set(Assignment.objects.values_list("experiment__key", flat=True)) == {"open"}


def test_assignments__assign_false__not_assigned_comes_before_the_gates(api):
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))

    body = answered(one(api, {"user": "u1"}, {"country": "FR"}, assign=False))

    assert body["unassigned"] == {"checkout-button": "not_assigned"}


def test_assignments__subject_type_missing__comes_before_the_gates(api):
    apply_resources(USER, COOKIE, gated(targeting=GERMAN_SPEAKING))

    body = answered(one(api, {"cookie": "c1"}, {}, experiments=["checkout-button"]))

    assert body["unassigned"] == {"checkout-button": "subject_type_missing"}


# --- winners: a roll-out to the targeted population ---


def test_winner__targeting__the_others_get_the_control_nothing_stored_whatever_assign_says(api):
    apply_resources(
        USER, gated(status="winner_declared", winning_variant="green", targeting=GERMAN_SPEAKING, coverage=0.0)
    )

    body = answered(batch(api, ["de", "fr", "none"], {"de": {"country": "DE"}, "fr": {"country": "FR"}}))
    assert body == {
        "assignments": {"de": "green", "fr": "control", "none": "control"},
        "excluded": {"fr": "not_targeted", "none": "attributes_missing"},
    }
    for assign in (True, False):
        assert answered(one(api, {"user": "fr"}, {"country": "FR"}, assign=assign))["unassigned"] == {
            "checkout-button": "not_targeted"
        }
        # Coverage and the window no longer apply to a winner.
        assert answered(one(api, {"user": "de"}, {"country": "DE"}, assign=assign))["assignments"] == {
            "checkout-button": "green"
        }
    assert stored() == {}


# --- following links: gates 1 to 4 first, then links, skipping coverage only ---


def test_follow_links__linked_identifier_assigned__carried_over_even_outside_coverage(api):
    apply_resources(USER, COOKIE, gated("banner", subject_type="cookie", follow_links=True))
    first = answered(batch(api, ["c-1"], key="banner"))["assignments"]["c-1"]
    link(("cookie", "c-1"), ("user", "u-1"))
    outside = next(f"c-{n}" for n in range(2, 500) if not covered("banner", f"c-{n}", 0.01))
    link(("user", "u-1"), ("cookie", outside))

    apply_resources(USER, COOKIE, gated("banner", subject_type="cookie", follow_links=True, coverage=0.01))
    body = answered(batch(api, [outside], key="banner"))

    assert body == {"assignments": {outside: first}}
    assert Assignment.objects.get(subject_id=outside).source == Assignment.Source.LINKED


def test_follow_links__not_targeted__not_carried_over(api):
    apply_resources(USER, COOKIE, gated("banner", subject_type="cookie", follow_links=True))
    answered(batch(api, ["c-1"], key="banner"))
    link(("cookie", "c-1"), ("cookie", "c-2"))
    apply_resources(
        USER,
        COOKIE,
        gated("banner", subject_type="cookie", follow_links=True, targeting=[{"attribute": "country", "gte": 10}]),
    )

    body = answered(batch(api, ["c-2"], {"c-2": {"country": 3}}, key="banner"))

    assert body["excluded"] == {"c-2": "not_targeted"}
    assert list(stored("banner")) == ["c-1"]


# --- visibility ---


def test_excluded_counter__by_experiment_and_reason(api, admin_token):
    apply_resources(USER, gated(targeting=GERMAN_SPEAKING))

    def scrape():
        return samples(Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {admin_token}").content.decode())

    before = scrape()
    answered(batch(api, ["fr", "none", "de"], {"fr": {"country": "FR"}, "de": {"country": "DE"}}))
    answered(one(api, {"user": "fr2"}, {"country": "FR"}))
    after = scrape()

    def moved(reason: str) -> float:
        labels = {"experiment": "checkout-button", "reason": reason}
        name = "assignment_subjects_excluded_total"
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert moved("not_targeted") == 2
    assert moved("attributes_missing") == 1


# --- gates 2 and 3: holdouts and layers ---


USER_WITH_COUNTRY = subject_type("user", attributes={"country": "string"})
PLAIN_COOKIE = subject_type("cookie")


def held_out(holdout_salt: str, subject_id: str, share: float) -> bool:
    return reference_variant(holdout_salt, subject_id, [("held_out", share), ("general", 1 - share)]) == "held_out"


def stored_sources(key: str) -> set[str]:
    return set(Assignment.objects.filter(experiment__key=key).values_list("source", flat=True))


def batch_answer(api, key: str, subject_ids: list[str]) -> dict:
    response = api.post("/experiment-assignments", {"experiment_id": key, "subject_ids": subject_ids})
    assert response.status_code == 200, response.content
    return json.loads(response.content)


def one_answer(api, subject: dict, **fields) -> dict:
    response = api.post("/assignments", {"subject": subject, **fields})
    assert response.status_code == 200, response.content
    return json.loads(response.content)


SUBJECTS = [f"s-{index}" for index in range(400)]


def test_layer__two_experiments__each_subject_enters_only_the_one_owning_its_slot(api):
    # Given two experiments splitting the layer between them
    apply_resources(
        USER_WITH_COUNTRY,
        layer("checkout-flow"),
        experiment("left", layer=in_layer("checkout-flow", [0, 5000])),
        experiment("right", layer=in_layer("checkout-flow", [5000, 10000])),
    )

    # When the same subjects ask both
    left, right = batch_answer(api, "left", SUBJECTS), batch_answer(api, "right", SUBJECTS)

    # Then each is stored in exactly the one owning its slot, and excluded from the other with the control
    for subject_id in SUBJECTS:
        owner, other = (left, right) if reference_slot("checkout-flow", subject_id) < 5000 else (right, left)
        assert subject_id not in owner.get("excluded", {})
        assert other["excluded"][subject_id] == "layer_excluded"
        assert other["assignments"][subject_id] == "control"
    assert set(stored("left")).isdisjoint(stored("right"))
    assert set(stored("left")) | set(stored("right")) == set(SUBJECTS)
    assert stored("left") == {s: reference_variant("left", s, SPLITS) for s in stored("left")}


def test_layer__explicit_salt__slots_drawn_with_it(api):
    apply_resources(
        USER_WITH_COUNTRY,
        layer("checkout-flow", salt="flow-2026"),
        experiment("left", layer=in_layer("checkout-flow", [0, 3000])),
    )

    body = batch_answer(api, "left", SUBJECTS)

    entered = {s for s in SUBJECTS if reference_slot("flow-2026", s) < 3000}
    assert set(stored("left")) == entered
    assert set(body["excluded"]) == set(SUBJECTS) - entered


def test_layer__salt_changed_before_any_assignment__next_request_uses_the_new_salt(api):
    # Given a cached state of the experiment, drawn with the layer's first salt
    apply_resources(
        USER_WITH_COUNTRY,
        layer("checkout-flow", salt="first"),
        experiment("left", layer=in_layer("checkout-flow", [0, 5000])),
    )
    batch_answer(api, "left", ["warm-up"])
    Assignment.objects.all().delete()

    # When the layer's salt changes (nothing stored in its experiments), then subjects ask
    apply_resources(
        USER_WITH_COUNTRY,
        layer("checkout-flow", salt="second"),
        experiment("left", layer=in_layer("checkout-flow", [0, 5000])),
    )
    body = batch_answer(api, "left", SUBJECTS)

    # Then the new salt decides
    assert set(body.get("excluded", {})) == {s for s in SUBJECTS if reference_slot("second", s) >= 5000}


def test_layer__comes_before_following_links__a_linked_identifier_outside_the_slots_is_not_carried_over(api):
    # Given an experiment following links that owns half a layer, and cookie c-in assigned in it
    apply_resources(
        USER_WITH_COUNTRY,
        PLAIN_COOKIE,
        layer("checkout-flow", subject_type="cookie"),
        experiment("banner", subject_type="cookie", follow_links=True, layer=in_layer("checkout-flow", [0, 5000])),
    )
    inside = next(f"c-{i}" for i in range(100) if reference_slot("checkout-flow", f"c-{i}") < 5000)
    outside = next(f"c-{i}" for i in range(100) if reference_slot("checkout-flow", f"c-{i}") >= 5000)
    batch_answer(api, "banner", [inside])
    for cookie in (inside, outside):
        link(("user", "u-1"), ("cookie", cookie))

    # When the linked cookie whose slot the experiment does not own asks
    body = batch_answer(api, "banner", [outside])

    # Then the layer keeps it out: it is not carried over
    assert body["excluded"] == {outside: "layer_excluded"}
    assert list(stored("banner")) == [inside]


def test_layer__winner_declared__everyone_gets_the_winner(api):
    apply_resources(
        USER_WITH_COUNTRY,
        layer("checkout-flow"),
        experiment("left", status="winner_declared", winning_variant="green", layer=in_layer("checkout-flow", [0, 10])),
    )

    body = batch_answer(api, "left", SUBJECTS)

    assert body == {"assignments": dict.fromkeys(SUBJECTS, "green")}


def test_holdout__held_out_members_get_the_control__memberships_stored_in_the_holdout(api):
    # Given an experiment covered by a holdout of share 0.3
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026", share=0.3), experiment("pricing", holdouts=["h-2026"]))

    # When new subjects ask
    body = batch_answer(api, "pricing", SUBJECTS)

    # Then the held_out members get the control and nothing in the experiment; every subject's membership
    # is stored in the holdout, hashed with the holdout's salt
    out = {s for s in SUBJECTS if held_out("h-2026", s, 0.3)}
    assert 80 < len(out) < 160
    assert body["excluded"] == dict.fromkeys(sorted(out, key=SUBJECTS.index), "held_out")
    assert all(body["assignments"][s] == "control" for s in out)
    assert stored("pricing") == {s: reference_variant("pricing", s, SPLITS) for s in SUBJECTS if s not in out}
    assert stored("h-2026") == {s: "held_out" if s in out else "general" for s in SUBJECTS}
    assert stored_sources("h-2026") == {"hashed"}


def test_holdout__two_holdouts__every_membership_made_and_either_holds_out(api):
    apply_resources(
        USER_WITH_COUNTRY,
        holdout("h-a", share=0.2),
        holdout("h-b", share=0.2),
        experiment("pricing", holdouts=["h-a", "h-b"]),
    )

    body = batch_answer(api, "pricing", SUBJECTS)

    out = {s for s in SUBJECTS if held_out("h-a", s, 0.2) or held_out("h-b", s, 0.2)}
    assert set(body["excluded"]) == out
    assert set(stored("h-a")) == set(stored("h-b")) == set(SUBJECTS)


def test_holdout__memberships_stored__read_again_and_never_made_twice(api):
    # Given memberships made through one experiment
    apply_resources(
        USER_WITH_COUNTRY,
        holdout("h-2026", share=0.3),
        experiment("pricing", holdouts=["h-2026"]),
        experiment("onboarding", holdouts=["h-2026"]),
    )
    batch_answer(api, "pricing", SUBJECTS)
    memberships = list(Assignment.objects.filter(experiment__key="h-2026").values_list("subject_id", "created_at"))

    # When the same subjects ask another experiment the holdout covers
    body = batch_answer(api, "onboarding", SUBJECTS)

    # Then the stored memberships decide, unchanged
    assert set(body["excluded"]) == {s for s in SUBJECTS if held_out("h-2026", s, 0.3)}
    after = list(Assignment.objects.filter(experiment__key="h-2026").values_list("subject_id", "created_at"))
    assert sorted(after) == sorted(memberships)


def test_holdout__ended__stops_nothing_and_makes_no_membership(api):
    apply_resources(
        USER_WITH_COUNTRY, holdout("h-2026", share=0.5, status="ended"), experiment("pricing", holdouts=["h-2026"])
    )

    body = batch_answer(api, "pricing", SUBJECTS)

    assert set(body) == {"assignments"}
    assert set(stored("pricing")) == set(SUBJECTS)
    assert stored("h-2026") == {}


def test_holdout__enrollment_not_started__no_membership_made(api):
    experiment_document = experiment("pricing", enrollment={"startAt": "2999-01-01T00:00:00Z"}, holdouts=["h-2026"])
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026"), experiment_document)

    body = batch_answer(api, "pricing", SUBJECTS[:10])

    assert body["excluded"] == dict.fromkeys(SUBJECTS[:10], "enrollment_not_started")
    assert stored("h-2026") == {}


def test_holdout__winner_declared__never_reaches_held_out_members(api):
    document = experiment("pricing", status="winner_declared", winning_variant="green", holdouts=["h-2026"])
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026", share=0.3), document)

    body = batch_answer(api, "pricing", SUBJECTS)

    out = {s for s in SUBJECTS if held_out("h-2026", s, 0.3)}
    assert body["assignments"] == {s: "control" if s in out else "green" for s in SUBJECTS}
    assert set(body["excluded"]) == out
    assert stored("pricing") == {}
    assert set(stored("h-2026")) == set(SUBJECTS)


def test_holdout__post_assignments__held_out_in_unassigned_and_membership_stored(api):
    apply_resources(
        USER_WITH_COUNTRY, holdout("h-2026", share=0.3), experiment("pricing", holdouts=["h-2026"]), experiment("plain")
    )
    out = next(s for s in SUBJECTS if held_out("h-2026", s, 0.3))

    body = one_answer(api, {"user": out}, experiments=["pricing", "plain"])

    assert body["unassigned"] == {"pricing": "held_out"}
    assert body["new_assignments"] == ["plain"]
    assert stored("h-2026") == {out: "held_out"}


def test_holdout__post_assignments_assign_false__winner_judged_by_the_formula_and_nothing_stored(api):
    document = experiment("pricing", status="winner_declared", winning_variant="green", holdouts=["h-2026"])
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026", share=0.3), document)
    out = next(s for s in SUBJECTS if held_out("h-2026", s, 0.3))
    general = next(s for s in SUBJECTS if not held_out("h-2026", s, 0.3))

    assert one_answer(api, {"user": out}, assign=False)["unassigned"] == {"pricing": "held_out"}
    assert one_answer(api, {"user": general}, assign=False)["assignments"] == {"pricing": "green"}
    assert stored("h-2026") == {}


@pytest.mark.parametrize("path", ["/experiment-assignments", "/assignments"])
def test_holdout__asked_on_an_assignment_endpoint__404_experiment_not_found(api, path):
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026"))
    body = (
        {"experiment_id": "h-2026", "subject_ids": ["u-1"]}
        if path == "/experiment-assignments"
        else {"subject": {"user": "u-1"}, "experiments": ["H-2026"]}
    )

    response = api.post(path, body)

    # Then the 404 says that the ID is a holdout's, and what to ask for instead
    assert response.status_code == 404
    problem = json.loads(response.content)
    assert problem["code"] == "experiment_not_found"
    assert problem["detail"].endswith(
        "is a holdout: ask for the experiments it covers, which it holds subjects out of."
    )
    assert stored("h-2026") == {}


def test_holdouts_and_an_unknown_id__asked_on_post_assignments__404_naming_each_holdout(api):
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026"), holdout("h-2027"))

    response = api.post("/assignments", {"subject": {"user": "u-1"}, "experiments": ["H-2026", "nope", "h-2027"]})

    assert response.status_code == 404
    assert json.loads(response.content)["detail"] == (
        "No experiments have the IDs 'H-2026', 'nope', 'h-2027'. 'H-2026', 'h-2027' are holdouts: ask for the "
        "experiments they cover, which they hold subjects out of."
    )


def test_holdout__post_assignments_without_experiments__holdouts_not_listed(api):
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026", share=0.01), experiment("pricing", holdouts=["h-2026"]))

    body = one_answer(api, {"user": "u-general"})

    assert set(body["assignments"]) | set(body.get("unassigned", {})) == {"pricing"}


@pytest.mark.parametrize("size", [1, 1000])
def test_holdouts__zero_or_three__same_statements_for_new_subjects(api, size):
    # Given an experiment without holdouts and one with three, in one layer, both cached
    apply_resources(
        USER_WITH_COUNTRY,
        layer("checkout-flow"),
        holdout("h-1", share=0.1),
        holdout("h-2", share=0.1),
        holdout("h-3", share=0.1),
        experiment("plain"),
        experiment("covered", holdouts=["h-1", "h-2", "h-3"], layer=in_layer("checkout-flow", [0, 9000])),
    )
    for key in ("plain", "covered"):
        batch_answer(api, key, ["warm-up"])

    # When a batch of new subjects asks each
    without = request_statements(
        api, "/experiment-assignments", {"experiment_id": "plain", "subject_ids": [f"p-{i}" for i in range(size)]}
    )
    subject_ids = [f"c-{i}" for i in range(size)]
    with_holdouts = request_statements(
        api, "/experiment-assignments", {"experiment_id": "covered", "subject_ids": subject_ids}
    )

    # Then the holdouts cost no statement, and asking again (memberships stored) is one read
    assert with_holdouts == without
    assert request_statements(
        api, "/experiment-assignments", {"experiment_id": "covered", "subject_ids": subject_ids}
    ) == batch_reads(size)
    assert len(stored("h-3")) == size + 1


def test_holdouts__post_assignments_many_experiments__same_statements_as_without(api):
    apply_resources(
        USER_WITH_COUNTRY,
        holdout("h-1", share=0.01),
        holdout("h-2", share=0.01),
        holdout("h-3", share=0.01),
        experiment("plain-1"),
        experiment("plain-2"),
        experiment("covered-1", holdouts=["h-1", "h-2", "h-3"]),
        experiment("covered-2", holdouts=["h-1", "h-3"]),
    )
    one_answer(api, {"user": "warm-up"})

    without = request_statements(
        api, "/assignments", {"subject": {"user": "u-1"}, "experiments": ["plain-1", "plain-2"]}
    )
    with_holdouts = request_statements(
        api, "/assignments", {"subject": {"user": "u-2"}, "experiments": ["covered-1", "covered-2"]}
    )

    assert with_holdouts == without
    assert set(stored("h-1")) == {"warm-up", "u-2"}


def test_stored_assignments__holdout_ended_winner_elsewhere_slots_grown__returned_unchanged(api):
    # Given subjects assigned in an experiment covered by a holdout, in a layer
    documents = [USER_WITH_COUNTRY, layer("checkout-flow"), holdout("h-2026", share=0.2)]
    apply_resources(*documents, experiment("pricing", holdouts=["h-2026"], layer=in_layer("checkout-flow", [0, 5000])))
    batch_answer(api, "pricing", SUBJECTS)
    before = stored("pricing")

    # When the holdout ends and the slots grow, and the same subjects ask again
    apply_resources(
        USER_WITH_COUNTRY,
        layer("checkout-flow"),
        holdout("h-2026", share=0.2, status="ended"),
        experiment("pricing", holdouts=["h-2026"], layer=in_layer("checkout-flow", [0, 8000])),
    )
    body = batch_answer(api, "pricing", list(before))

    # Then every stored assignment comes back as stored
    assert body == {"assignments": before}
    assert stored("pricing") == before


def test_holdout__ended_while_the_experiment_is_cached__next_request_no_longer_holds_out(api):
    # Given the experiment's state cached with an active holdout holding out everyone new
    apply_resources(USER_WITH_COUNTRY, holdout("h-2026", share=0.5), experiment("pricing", holdouts=["h-2026"]))
    out = [s for s in SUBJECTS if held_out("h-2026", s, 0.5)]
    assert set(batch_answer(api, "pricing", out[:5])["excluded"]) == set(out[:5])

    # When the holdout alone changes (the experiment's own version does not move)
    apply_resources(
        USER_WITH_COUNTRY, holdout("h-2026", share=0.5, status="ended"), experiment("pricing", holdouts=["h-2026"])
    )
    body = batch_answer(api, "pricing", out[5:10])

    # Then the next request sees it: nobody is held out, and the new subjects are stored
    assert set(body) == {"assignments"}
    assert set(stored("pricing")) == set(out[5:10])


# --- concurrent requests for the same new subjects: one stored row each, every answer equal to it ---


THREADS = 8
RACED_SUBJECTS = 500
# A deadlock needs two inserts to overlap in time, which one burst of threads does not
# always achieve; several bursts make a batch insert in an unsorted order fail reliably.
ROUNDS = 5

# Its own lab: a transactional test empties the tables afterwards, so it cannot count on
# the `default` lab that the migrations create.
CONFIG = (
    subject_type("user"),
    lab("race"),
    experiment(
        "race-exp", lab="race", variants=[variant("control", 0.3, control=True), variant("b", 0.3), variant("c", 0.4)]
    ),
)
RACE_SPLITS = [("control", 0.3), ("b", 0.3), ("c", 0.4)]


def at_once(token: str, requests: list[tuple[str, dict]]) -> list[dict]:
    """Each (path, body) posted from its own thread, all released at once; the answers' `assignments`,
    in the order of the requests."""
    barrier = threading.Barrier(len(requests))
    answers: list[dict | None] = [None] * len(requests)
    failures: list[BaseException] = []

    def ask(index: int, path: str, body: dict) -> None:
        try:
            client = Client()
            barrier.wait(timeout=30)
            response = client.post(
                path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
            )
            assert response.status_code == 200, response.content
            answers[index] = json.loads(response.content)["assignments"]
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(index, *request)) for index, request in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a request hung"
    assert not failures, failures
    return answers


def race(token: str, subject_ids: list[str]) -> list[dict]:
    """THREADS requests for subject_ids, each in its own order, released at once; their answers."""
    orders = [random.Random(number).sample(subject_ids, len(subject_ids)) for number in range(THREADS)]
    return at_once(
        token, [("/experiment-assignments", {"experiment_id": "race-exp", "subject_ids": order}) for order in orders]
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_assign__8_threads_racing_for_the_same_500_new_subjects__one_row_each_and_all_answers_agree():
    # Given committed configuration and token
    apply_resources(*CONFIG)
    token = api_token_create(name="race", role=Role.PROXY)[1]

    for round_number in range(ROUNDS):
        # When 8 requests ask at once for the same 500 subjects nobody has asked for yet
        subject_ids = [f"racer-{round_number}-{index}" for index in range(RACED_SUBJECTS)]
        answers = race(token, subject_ids)

        # Then nobody failed, exactly one row per subject exists, and every answer is the stored row
        rows = list(
            Assignment.objects.filter(subject_id__in=subject_ids).values_list("subject_id", "variant__key", "cohort")
        )
        assert len(rows) == RACED_SUBJECTS
        stored = {subject_id: variant for subject_id, variant, _ in rows}
        assert {cohort for _, _, cohort in rows} == {1}
        for answer in answers:
            assert answer == stored
        assert stored == {
            subject_id: reference_variant("race-exp", subject_id, RACE_SPLITS) for subject_id in subject_ids
        }
    assert Assignment.objects.count() == ROUNDS * RACED_SUBJECTS
    # And the counts the triggers kept through the races (one shard per backend) equal the rows
    report = experiment_report(Experiment.objects.get(key="race-exp"))
    counted = dict(Assignment.objects.values_list("variant__key").annotate(total=Count("*")))
    assert {line.variant_id: line.assignments for line in report.cohorts[0].variants} == counted


BOTH_ENDPOINTS_THREADS = 16
BOTH_ENDPOINTS_CONFIG = (
    subject_type("user"),
    subject_type("device"),
    lab("race"),
    experiment("race-a", lab="race", variants=[variant("control", 0.5, control=True), variant("b", 0.5)]),
    experiment(
        "race-b", lab="race", variants=[variant("control", 0.2, control=True), variant("b", 0.3), variant("c", 0.5)]
    ),
    experiment(
        "race-linked",
        lab="race",
        follow_links=True,
        variants=[variant("control", 0.5, control=True), variant("b", 0.5)],
    ),
)
RACED_EXPERIMENTS = ["race-a", "race-b", "race-linked"]


def race_both_endpoints(token: str, subject_id: str) -> list[dict[str, str]]:
    """16 requests for one new subject, released at once: even threads ask POST /assignments for the
    three experiments, odd ones POST /experiment-assignments for one of them each; the answers as
    {experiment: variant}."""
    requests = []
    for number in range(BOTH_ENDPOINTS_THREADS):
        if number % 2 == 0:
            body = {"subject": {"user": subject_id}, "experiments": RACED_EXPERIMENTS[number % 3 :]}
            requests.append(("/assignments", body))
        else:
            body = {"experiment_id": RACED_EXPERIMENTS[number % 3], "subject_ids": [subject_id]}
            requests.append(("/experiment-assignments", body))
    # /experiment-assignments answers by subject: as {experiment: variant} every answer compares alike.
    return [
        answer if path == "/assignments" else {body["experiment_id"]: answer[subject_id]}
        for (path, body), answer in zip(requests, at_once(token, requests), strict=True)
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_both_endpoints__16_threads_racing_for_one_new_subject_in_3_experiments__one_row_each_everywhere():
    # Given committed configuration and token
    apply_resources(*BOTH_ENDPOINTS_CONFIG)
    token = api_token_create(name="race", role=Role.PROXY)[1]
    linked_variant = {}
    for round_number in range(ROUNDS):
        # And, for race-linked, an assigned user linked to the new one through a device
        subject_id, origin = f"racer-{round_number}", f"origin-{round_number}"
        Client().post(
            "/experiment-assignments",
            json.dumps({"experiment_id": "race-linked", "subject_ids": [origin]}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        link(("user", origin), ("device", f"d-{round_number}"))
        link(("device", f"d-{round_number}"), ("user", subject_id))
        linked_variant[subject_id] = Assignment.objects.get(subject_id=origin).variant.key

        # When 16 requests ask at once for the new user through both endpoints
        answers = race_both_endpoints(token, subject_id)

        # Then exactly one row per experiment exists, and every answer is the stored row
        rows = Assignment.objects.filter(subject_id=subject_id).values_list("experiment__key", "variant__key", "source")
        stored = {experiment: variant for experiment, variant, _ in rows}
        assert len(rows) == 3
        for answer in answers:
            assert answer == {experiment: stored[experiment] for experiment in answer}
        # And race-linked carried the linked user's variant over, the others hashed
        assert stored["race-linked"] == linked_variant[subject_id]
        assert {experiment: source for experiment, _, source in rows} == {
            "race-a": "hashed",
            "race-b": "hashed",
            "race-linked": "linked",
        }
        assert stored["race-a"] == reference_variant("race-a", subject_id, [("control", 0.5), ("b", 0.5)])
