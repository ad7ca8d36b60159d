"""assignments/console/population_text.py: a cohort's population rule and the gates' reasons, in words."""

from __future__ import annotations

import pytest

from assignments import gates
from assignments.console.population_text import percent_text, plural, population_text, reason_text

START, STOP = "2026-12-01T08:00:00Z", "2027-01-14T23:00:00Z"


@pytest.mark.parametrize(
    ("condition", "words"),
    [
        ({"attribute": "plan", "equals": "pro"}, "plan is pro"),
        ({"attribute": "seats", "equals": 10}, "seats is 10"),
        ({"attribute": "beta", "equals": True}, "beta is true"),
        ({"attribute": "appVersion", "equals": "2.3"}, "appVersion is 2.3"),
        ({"attribute": "country", "in": ["DE", "AT"]}, "country in [DE, AT]"),
        ({"attribute": "seats", "in": [1, 2.5]}, "seats in [1, 2.5]"),
        ({"attribute": "country", "notIn": ["CH"]}, "country not in [CH]"),
        ({"attribute": "seats", "gt": 10}, "seats > 10"),
        ({"attribute": "seats", "gte": 10}, "seats ≥ 10"),
        ({"attribute": "appVersion", "lt": "3"}, "appVersion < 3"),
        ({"attribute": "appVersion", "lte": "2.10.1"}, "appVersion ≤ 2.10.1"),
        ({"attribute": "country", "exists": True}, "country sent"),
        ({"attribute": "country", "exists": False}, "country not sent"),
        ({"attribute": "city", "in": ["Paris, TX", " Rome", ""]}, 'city in ["Paris, TX", " Rome", ""]'),
    ],
)
def test_population_text__each_operator__in_words(condition, words):
    assert population_text({"targeting": [condition]}, subject_type="user") == f"every user with {words}"


def test_population_text__any_of_and_all_of__parenthesised_or_inside_and_between():
    targeting = [
        {"attribute": "country", "in": ["DE", "AT"]},
        {"anyOf": [{"attribute": "plan", "equals": "pro"}, {"attribute": "seats", "gte": 10}]},
        {"anyOf": [{"attribute": "beta", "exists": True}]},
    ]

    assert population_text({"targeting": targeting}, subject_type="user") == (
        "every user with country in [DE, AT] and (plan is pro or seats ≥ 10) and beta sent"
    )


@pytest.mark.parametrize(
    ("population", "words"),
    [
        ({}, "every user"),
        ({"coverage": 0.2}, "20 % of users"),
        ({"coverage": 0.125}, "12.5 % of users"),
        ({"coverage": 1 / 3}, "33.3333 % of users"),
        ({"coverage": 0.0}, "no user (coverage 0 %)"),
        ({"coverage": 0, "targeting": [{"attribute": "plan", "equals": "pro"}]}, "no user (coverage 0 %)"),
        (
            {"enrollment": {"startAt": START, "stopAt": STOP}},
            f"every user, between {START[:10]} 08:00 UTC and 2027-01-14 23:00 UTC",
        ),
        ({"enrollment": {"startAt": START}}, "every user, from 2026-12-01 08:00 UTC on"),
        ({"enrollment": {"stopAt": STOP}}, "every user, before 2027-01-14 23:00 UTC"),
        ({"enrollment": {"startAt": "2026-12-01T09:00:30+01:00"}}, "every user, from 2026-12-01 08:00:30 UTC on"),
    ],
)
def test_population_text__coverage_and_window__in_words(population, words):
    assert population_text(population, subject_type="user") == words


def test_population_text__every_gate__one_sentence():
    population = {
        "enrollment": {"startAt": START, "stopAt": STOP},
        "targeting": [{"attribute": "country", "in": ["DE", "AT"]}],
        "coverage": 0.2,
    }

    assert population_text(population, subject_type="user") == (
        "20 % of users with country in [DE, AT], between 2026-12-01 08:00 UTC and 2027-01-14 23:00 UTC"
    )


@pytest.mark.parametrize(
    ("noun", "nouns"), [("user", "users"), ("address", "addresses"), ("company", "companies"), ("key", "keys")]
)
def test_plural__subject_type_ids__english_plurals(noun, nouns):
    assert plural(noun) == nouns


@pytest.mark.parametrize(("share", "text"), [(1, "100 %"), (0.07, "7 %"), (0.5, "50 %"), (1e-7, "0.00001 %")])
def test_percent_text__shares__percentages_without_float_noise(share, text):
    assert percent_text(share) == text


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (gates.ENROLLMENT_NOT_STARTED, "its enrollment window has not started: it opens at 2026-12-01 08:00 UTC"),
        (gates.ENROLLMENT_CLOSED, "its enrollment window has closed: it closed at 2027-01-14 23:00 UTC"),
        (gates.ATTRIBUTES_MISSING, "the targeting needs attributes that were not sent"),
        (gates.NOT_TARGETED, "the attributes sent do not meet the targeting"),
        (gates.OUTSIDE_COVERAGE, "its coverage draw is outside the coverage of 20 %"),
    ],
)
def test_reason_text__each_gates_reason__in_words(reason, words):
    population = {"enrollment": {"startAt": START, "stopAt": STOP}, "coverage": 0.2}

    assert reason_text(reason, population) == words


@pytest.mark.parametrize(
    ("slots", "words"),
    [
        ([[0, 2500]], "slots 0 to 2499"),
        ([[7, 8]], "slot 7"),
        ([[0, 100], [500, 501], [9000, 10000]], "slots [0 to 99, 500, 9000 to 9999]"),
    ],
)
def test_population_text__layer__the_slots_owned_in_it(slots, words):
    population = {"layer": {"id": "checkout-flow", "slots": slots}}

    assert population_text(population, subject_type="user") == f"every user in {words} of layer checkout-flow"


def test_population_text__layer_with_the_other_gates__in_the_sentence_before_the_targeting():
    population = {
        "enrollment": {"startAt": START},
        "layer": {"id": "checkout-flow", "slots": [[0, 2500]]},
        "targeting": [{"attribute": "country", "in": ["DE", "AT"]}],
        "coverage": 0.2,
    }

    assert population_text(population, subject_type="user") == (
        "20 % of users in slots 0 to 2499 of layer checkout-flow with country in [DE, AT], from 2026-12-01 08:00 UTC on"
    )
