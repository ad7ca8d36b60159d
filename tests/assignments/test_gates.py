"""assignments/gates.py: the gates as pure functions, every operator, the reasons and their order, and
gates.decide: the gates in their order and the formula, for one subject, storing nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assignments import gates
from assignments.gates import Decision, Gates, Targeting, decide, version_parse
from assignments.hashing import SCALE, Allocation, draws, threshold

TYPES = {"country": "string", "seats": "number", "beta": "boolean", "appVersion": "version"}
START = datetime(2026, 12, 1, 8, tzinfo=UTC)
STOP = datetime(2027, 1, 15, tzinfo=UTC)


def targeting(*documents: dict) -> Targeting:
    return Targeting.from_documents(list(documents), TYPES)


def holds(document: dict, attributes: dict) -> bool:
    return targeting(document).reason(attributes) is None


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("2", (2, 0, 0, 0)),
        ("2.3", (2, 3, 0, 0)),
        ("2.10.1", (2, 10, 1, 0)),
        ("1.2.3.4", (1, 2, 3, 4)),
        ("007", (7, 0, 0, 0)),
    ],
)
def test_version_parse__one_to_four_numbers__padded_with_zeros(text, parts):
    assert version_parse(text) == parts


@pytest.mark.parametrize("text", ["", "2.", ".2", "1.2.3.4.5", "2.x", "v2", "-1", "2 .3", "٣", 2, None])
def test_version_parse__anything_else__none(text):
    assert version_parse(text) is None


@pytest.mark.parametrize(
    ("document", "attributes", "expected"),
    [
        ({"attribute": "country", "equals": "DE"}, {"country": "DE"}, True),
        ({"attribute": "country", "equals": "DE"}, {"country": "de"}, False),
        ({"attribute": "seats", "equals": 10}, {"seats": 10.0}, True),
        ({"attribute": "beta", "equals": False}, {"beta": False}, True),
        ({"attribute": "beta", "equals": True}, {"beta": False}, False),
        ({"attribute": "appVersion", "equals": "2.3"}, {"appVersion": "2.3.0"}, True),
        ({"attribute": "appVersion", "equals": "2.3"}, {"appVersion": "2.3.1"}, False),
        ({"attribute": "country", "in": ["DE", "AT"]}, {"country": "AT"}, True),
        ({"attribute": "country", "in": ["DE", "AT"]}, {"country": "FR"}, False),
        ({"attribute": "seats", "in": [1, 2.5]}, {"seats": 2.5}, True),
        ({"attribute": "country", "notIn": ["DE"]}, {"country": "FR"}, True),
        ({"attribute": "country", "notIn": ["DE"]}, {"country": "DE"}, False),
        ({"attribute": "seats", "gt": 10}, {"seats": 11}, True),
        ({"attribute": "seats", "gt": 10}, {"seats": 10}, False),
        ({"attribute": "seats", "gte": 10}, {"seats": 10}, True),
        ({"attribute": "seats", "lt": 10}, {"seats": 9.5}, True),
        ({"attribute": "seats", "lte": 10}, {"seats": 10.5}, False),
        ({"attribute": "appVersion", "gte": "2.3"}, {"appVersion": "2.10"}, True),
        ({"attribute": "appVersion", "gt": "2.3"}, {"appVersion": "2.3.0"}, False),
        ({"attribute": "appVersion", "lt": "2.10.1"}, {"appVersion": "2.9.99"}, True),
        ({"attribute": "appVersion", "lte": "1"}, {"appVersion": "1.0.0.1"}, False),
        ({"attribute": "beta", "exists": True}, {"beta": False}, True),
        ({"attribute": "beta", "exists": False}, {"beta": False}, False),
        ({"attribute": "beta", "exists": False}, {}, True),
    ],
)
def test_condition__each_operator_and_type__holds_as_the_table_says(document, attributes, expected):
    assert holds(document, attributes) is expected


@pytest.mark.parametrize(
    "document",
    [
        {"attribute": "country", "equals": "DE"},
        {"attribute": "country", "in": ["DE"]},
        {"attribute": "seats", "gt": 1},
        {"attribute": "appVersion", "lte": "9"},
        {"attribute": "beta", "exists": True},
    ],
)
def test_condition__attribute_not_sent__false_and_attributes_missing(document):
    assert targeting(document).reason({}) == gates.ATTRIBUTES_MISSING


def test_condition__not_in_with_attribute_not_sent__holds():
    assert targeting({"attribute": "country", "notIn": ["DE"]}).reason({}) is None


def test_condition__value_of_another_type_than_declared__not_targeted_never_an_error():
    # A declaration changed within the subject-type cache's lifetime: the value matches nothing.
    assert targeting({"attribute": "seats", "gt": 1}).reason({"seats": "12"}) == gates.NOT_TARGETED
    assert targeting({"attribute": "seats", "in": [1]}).reason({"seats": True}) == gates.NOT_TARGETED


def test_targeting__one_failed_condition_names_a_sent_attribute__not_targeted():
    rule = targeting({"attribute": "country", "equals": "DE"}, {"attribute": "seats", "gte": 10})

    assert rule.reason({"country": "DE", "seats": 12}) is None
    assert rule.reason({"country": "FR"}) == gates.NOT_TARGETED
    assert rule.reason({"seats": 1}) == gates.NOT_TARGETED
    assert rule.reason({"country": "DE"}) == gates.ATTRIBUTES_MISSING
    assert rule.reason({}) == gates.ATTRIBUTES_MISSING


def test_targeting__any_of__holds_when_one_holds_missing_only_when_none_of_its_attributes_sent():
    rule = targeting({"anyOf": [{"attribute": "country", "equals": "DE"}, {"attribute": "seats", "gte": 10}]})

    assert rule.reason({"seats": 10}) is None
    assert rule.reason({"country": "DE", "seats": 1}) is None
    assert rule.reason({}) == gates.ATTRIBUTES_MISSING
    assert rule.reason({"seats": 1}) == gates.NOT_TARGETED


def test_gates__nothing_configured__let_everyone_in_and_say_so():
    assert Gates().any is False
    assert Gates().screen("s-1", {}, START) is None
    assert Gates().covers(SCALE - 1)


def test_window__start_inclusive_stop_exclusive():
    window = Gates(start_at=START, stop_at=STOP)
    tick = timedelta(microseconds=1)

    assert window.screen("s-1", {}, START - tick) == gates.ENROLLMENT_NOT_STARTED
    assert window.screen("s-1", {}, START) is None
    assert window.screen("s-1", {}, STOP - tick) is None
    assert window.screen("s-1", {}, STOP) == gates.ENROLLMENT_CLOSED


def test_screen__window_closed_and_not_targeted__the_window_first():
    both = Gates.configured(
        start_at=None,
        stop_at=START,
        targeting=[{"attribute": "country", "equals": "DE"}],
        attribute_types=TYPES,
        coverage=1.0,
    )

    assert both.screen("s-1", {"country": "FR"}, STOP) == gates.ENROLLMENT_CLOSED
    assert both.screen("s-1", {"country": "FR"}, START - timedelta(days=1)) == gates.NOT_TARGETED


def test_coverage__draw_compared_exactly_with_ceil_coverage_times_2_to_the_64():
    nobody, everyone, half = (Gates(coverage_threshold=threshold(share)) for share in (0.0, 1.0, 0.5))

    assert not nobody.covers(0)
    assert everyone.covers(SCALE - 1)
    assert half.covers(SCALE // 2 - 1)
    assert not half.covers(SCALE // 2)
    # 0.1 as read is the binary double 3602879701896397 / 2**55, a little above 1/10: that exact value
    # decides (times 2**64 it is a whole number), not 2**64 / 10 rounded up (1844674407370955162).
    assert threshold(0.1) == 3602879701896397 * 2**9 == 1844674407370955264


@given(st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1), st.integers(0, SCALE - 1))
def test_coverage__raised__only_adds_subjects(first, second, draw):
    low, high = sorted((first, second))

    if Gates(coverage_threshold=threshold(low)).covers(draw):
        assert Gates(coverage_threshold=threshold(high)).covers(draw)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("DE", None),
        (3, None),
        (2.5, None),
        (True, None),
        ("x" * 256, None),
        ("x" * 257, "must be at most 256 characters"),
        ("a\nb", "must not contain control characters"),
        (float("inf"), "must be a finite number"),
        (None, "must be a string, a finite number or a boolean"),
        ([1], "must be a string, a finite number or a boolean"),
        ({"a": 1}, "must be a string, a finite number or a boolean"),
    ],
)
def test_value_problem__what_an_attribute_value_may_be(value, problem):
    assert gates.value_problem(value) == problem


def test_attribute_problems__declared_types_checked_undeclared_ignored():
    sent = {"country": 49, "seats": True, "beta": "yes", "appVersion": "2.x", "free": {"any": "thing"}}

    assert set(gates.attribute_problems(sent, TYPES)) == {"country", "seats", "beta", "appVersion"}
    assert gates.attribute_problems({"country": "DE", "seats": 2, "beta": False, "appVersion": "2"}, TYPES) == {}


# --- gates.decide: the gates in their order and the formula, for one subject, storing nothing ---


NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
DECIDE_TYPES = {"country": "string", "plan": "string", "seats": "number"}


TARGETING = [
    {"attribute": "country", "in": ["DE", "AT"]},
    {"anyOf": [{"attribute": "plan", "equals": "pro"}, {"attribute": "seats", "gte": 10}]},
    {"attribute": "country", "notIn": ["CH"]},
]
ALLOCATION = Allocation([("control", 0.5), ("green", 0.5)])


def configured(*, start=None, stop=None, targeting=None, coverage=1.0) -> Gates:
    return Gates.configured(
        start_at=start, stop_at=stop, targeting=targeting, attribute_types=DECIDE_TYPES, coverage=coverage
    )


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
