"""Who enters an experiment, through both assignment endpoints (docs/explanation/population.md):
attributes validated, excluded subjects answered with the control and never stored, stored assignments
winning over every later change of a gate, winners and following links."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from assignments.models import Assignment
from idlinks.services import Identifier, id_link_create
from tests.helpers.api import assert_problem, error_fields
from tests.helpers.assignments import assigned_store, reference_variant
from tests.helpers.observability import sample, samples
from tests.helpers.resources import apply_resources, experiment, subject_type

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
    id_link_create(first=Identifier("cookie", "c-1"), second=Identifier("user", "u-1"))
    outside = next(f"c-{n}" for n in range(2, 500) if not covered("banner", f"c-{n}", 0.01))
    id_link_create(first=Identifier("user", "u-1"), second=Identifier("cookie", outside))

    apply_resources(USER, COOKIE, gated("banner", subject_type="cookie", follow_links=True, coverage=0.01))
    body = answered(batch(api, [outside], key="banner"))

    assert body == {"assignments": {outside: first}}
    assert Assignment.objects.get(subject_id=outside).source == Assignment.Source.LINKED


def test_follow_links__not_targeted__not_carried_over(api):
    apply_resources(USER, COOKIE, gated("banner", subject_type="cookie", follow_links=True))
    answered(batch(api, ["c-1"], key="banner"))
    id_link_create(first=Identifier("cookie", "c-1"), second=Identifier("cookie", "c-2"))
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
