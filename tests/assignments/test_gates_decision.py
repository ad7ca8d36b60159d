"""gates.decide: the gates in their order and the formula, for one subject, storing nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from assignments import gates
from assignments.gates import Decision, Gates, decide
from assignments.hashing import SCALE, Allocation, draws

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
TYPES = {"country": "string", "plan": "string", "seats": "number"}
TARGETING = [
    {"attribute": "country", "in": ["DE", "AT"]},
    {"anyOf": [{"attribute": "plan", "equals": "pro"}, {"attribute": "seats", "gte": 10}]},
    {"attribute": "country", "notIn": ["CH"]},
]
ALLOCATION = Allocation([("control", 0.5), ("green", 0.5)])


def configured(*, start=None, stop=None, targeting=None, coverage=1.0) -> Gates:
    return Gates.configured(start_at=start, stop_at=stop, targeting=targeting, attribute_types=TYPES, coverage=coverage)


def decided(gates_: Gates, *, attributes=None, linked=None, subject_id="u-1") -> Decision:
    return decide(
        gates_, ALLOCATION, salt="checkout", subject_id=subject_id, attributes=attributes, now=NOW, linked=linked
    )


@pytest.mark.parametrize(
    ("window", "reason"),
    [
        ({"start": datetime(2026, 12, 10, 12, 0, 1, tzinfo=UTC)}, gates.ENROLLMENT_NOT_STARTED),
        ({"stop": NOW}, gates.ENROLLMENT_CLOSED),
    ],
)
def test_decide__outside_the_window__window_reason_even_when_linked_or_attributes_unknown(window, reason):
    for attributes in (None, {"country": "DE", "plan": "pro"}):
        assert decided(configured(**window), attributes=attributes, linked="green") == Decision(reason=reason)


def test_decide__window_start_reached__enters():
    assert decided(configured(start=NOW)).reason is None


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({}, gates.ATTRIBUTES_MISSING),
        ({"country": "FR", "plan": "pro"}, gates.NOT_TARGETED),
        ({"country": "DE", "plan": "free", "seats": 3}, gates.NOT_TARGETED),
    ],
)
def test_decide__targeting_fails__its_reason_and_no_variant_even_when_linked(attributes, reason):
    assert decided(configured(targeting=TARGETING), attributes=attributes, linked="green") == Decision(reason=reason)


def test_decide__targeting_holds__the_formulas_variant():
    decision = decided(configured(targeting=TARGETING), attributes={"country": "AT", "seats": 12})

    assert decision == Decision(variant=ALLOCATION.variant_for("checkout", "u-1"))


def test_decide__attributes_unknown_and_targeting__depends_on_its_attributes_in_order_then_the_variant():
    decision = decided(configured(targeting=TARGETING))

    assert decision.depends_on == ("country", "plan", "seats")
    assert (decision.reason, decision.variant) == (None, ALLOCATION.variant_for("checkout", "u-1"))


def test_decide__attributes_unknown_without_targeting__decided():
    assert decided(configured()).depends_on == ()


def test_decide__linked_variant__carried_over_past_coverage_0():
    assert decided(configured(coverage=0.0), attributes={}, linked="green") == Decision(variant="green", linked=True)


def test_decide__coverage_0__outside_coverage_whatever_the_subject():
    for subject_id in ("u-1", "u-2", "u-3"):
        assert decided(configured(coverage=0.0), subject_id=subject_id) == Decision(reason=gates.OUTSIDE_COVERAGE)


def test_decide__coverage_draw_at_the_threshold__outside_one_below__in():
    coverage_draw = draws("checkout", "u-1")[1]

    assert decided(Gates(coverage_threshold=coverage_draw)).reason == gates.OUTSIDE_COVERAGE
    assert decided(Gates(coverage_threshold=coverage_draw + 1)).variant is not None
    assert decided(Gates(coverage_threshold=SCALE)).variant is not None


def test_decide__unknown_attributes_and_outside_coverage__both_said():
    decision = decided(configured(targeting=TARGETING, coverage=0.0))

    assert decision == Decision(reason=gates.OUTSIDE_COVERAGE, depends_on=("country", "plan", "seats"))
