"""Who enters an experiment, in words: a cohort's population rule and the gates' reasons, for staff.

A cohort records its population as the YAML holds it (resources.population_document:
`enrollment`, `layer`, `targeting` and `coverage`, each only when it narrows who enters),
and the staff console states it as one sentence, such as "20 % of users in slots 0 to 2499
of layer checkout-flow with country in [DE, AT] and (plan is pro or seats ≥ 10), between
2026-12-01 08:00 UTC and 2027-01-14 23:00 UTC". Lists are bracketed and an anyOf is
parenthesised, so that no comma or "and" of a value can be read as part of the sentence.
Slots are named as the slots owned (a range [0, 2500] owns 0 to 2499), times in UTC, as
stored. Pure functions of their arguments: no database, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from assignments import gates

COMPARISONS = {"gt": ">", "gte": "≥", "lt": "<", "lte": "≤"}

# The gates' reasons (gates.REASONS) in words; the enrollment window's name its time in population_reason_text.
REASON_TEXT = {
    gates.ENROLLMENT_NOT_STARTED: "its enrollment window has not started",
    gates.ENROLLMENT_CLOSED: "its enrollment window has closed",
    gates.HELD_OUT: "it is held out by a holdout covering the experiment",
    gates.LAYER_EXCLUDED: "its slot of the layer belongs to no slot range of the experiment",
    gates.ATTRIBUTES_MISSING: "the targeting needs attributes that were not sent",
    gates.NOT_TARGETED: "the attributes sent do not meet the targeting",
    gates.OUTSIDE_COVERAGE: "its coverage draw is outside the coverage",
}


def percent_text(share: float) -> str:
    """A share as a percentage of at most 6 significant digits: 0.2 -> "20 %", 0.125 -> "12.5 %"."""
    text = f"{share * 100:.6g}"
    if "e" in text:
        # A tiny share: written out rather than as 1e-05.
        text = f"{float(text):.12f}".rstrip("0").rstrip(".")
    return f"{text} %"


def time_words(value: datetime) -> str:
    """An instant in UTC to the minute, with seconds (and fractions) only when it has them."""
    value = value.astimezone(UTC)
    if value.microsecond:
        return value.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    if value.second:
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return value.strftime("%Y-%m-%d %H:%M UTC")


def plural(noun: str) -> str:
    """An English plural of a subject type's ID, for a sentence: user -> users, address -> addresses."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return f"{noun}es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return f"{noun[:-1]}ies"
    return f"{noun}s"


def value_text(value: object) -> str:
    """A condition's value as written in a sentence; a string that could blur the sentence is quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if not value or value != value.strip() or any(mark in value for mark in ',[]()"'):
            return json.dumps(value, ensure_ascii=False)
        return value
    return str(value)


def condition_text(condition: Mapping[str, Any]) -> str:
    """One `{attribute: NAME, OPERATOR: VALUE}` in words."""
    name = condition["attribute"]
    (operator,) = (key for key in condition if key != "attribute")
    value = condition[operator]
    if operator == "equals":
        return f"{name} is {value_text(value)}"
    if operator in gates.LIST_OPERATORS:
        items = ", ".join(value_text(item) for item in value)
        return f"{name} {'in' if operator == 'in' else 'not in'} [{items}]"
    if operator == "exists":
        return f"{name} sent" if value else f"{name} not sent"
    return f"{name} {COMPARISONS[operator]} {value_text(value)}"


def targeting_text(targeting: list[Mapping[str, Any]]) -> str:
    """Conditions that must all hold, joined by "and"; an anyOf of several in parentheses, joined by "or"."""
    clauses = []
    for clause in targeting:
        if "anyOf" in clause:
            inner = " or ".join(condition_text(condition) for condition in clause["anyOf"])
            clauses.append(f"({inner})" if len(clause["anyOf"]) > 1 else inner)
        else:
            clauses.append(condition_text(clause))
    return " and ".join(clauses)


def _instant(value: str | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def window_text(enrollment: Mapping[str, Any]) -> str:
    """The enrollment window (start inclusive, stop exclusive) in words; "" when it has neither."""
    start, stop = enrollment.get("startAt"), enrollment.get("stopAt")
    if start is not None and stop is not None:
        return f"between {time_words(_instant(start))} and {time_words(_instant(stop))}"
    if start is not None:
        return f"from {time_words(_instant(start))} on"
    if stop is not None:
        return f"before {time_words(_instant(stop))}"
    return ""


def slot_range_text(start: int, end: int) -> str:
    """A half-open range [start, end) as the slots it owns: "0 to 2499", or "7" for one slot."""
    return str(start) if end - start == 1 else f"{start} to {end - 1}"


def slots_text(slots: Sequence[Sequence[int]]) -> str:
    """Slot ranges as the slots they own: "slots 0 to 2499", "slot 7", several bracketed: "slots [0 to 99,
    500 to 599]"."""
    if len(slots) == 1:
        ((start, end),) = slots
        return f"slot {start}" if end - start == 1 else f"slots {slot_range_text(start, end)}"
    return "slots [" + ", ".join(slot_range_text(start, end) for start, end in slots) + "]"


def population_text(population: Mapping[str, Any], *, subject_type: str) -> str:
    """A population document (a cohort's, or experiment_population's) as one sentence about subjects of
    `subject_type`: "every user", "20 % of users in slots 0 to 2499 of layer checkout with country in [DE],
    between A and B", "no user (coverage 0 %)"."""
    coverage = population.get("coverage", 1)
    if coverage == 0:
        return f"no {subject_type} (coverage 0 %)"
    text = f"every {subject_type}" if coverage == 1 else f"{percent_text(coverage)} of {plural(subject_type)}"
    if population.get("layer"):
        layer = population["layer"]
        text += f" in {slots_text(layer['slots'])} of layer {layer['id']}"
    if population.get("targeting"):
        text += f" with {targeting_text(population['targeting'])}"
    window = window_text(population.get("enrollment", {}))
    return f"{text}, {window}" if window else text


def reason_text(reason: str, population: Mapping[str, Any]) -> str:
    """Why a gate stopped a subject, in words, with the window's time or the coverage it was outside."""
    enrollment = population.get("enrollment", {})
    if reason == gates.ENROLLMENT_NOT_STARTED:
        return f"{REASON_TEXT[reason]}: it opens at {time_words(_instant(enrollment['startAt']))}"
    if reason == gates.ENROLLMENT_CLOSED:
        return f"{REASON_TEXT[reason]}: it closed at {time_words(_instant(enrollment['stopAt']))}"
    if reason == gates.OUTSIDE_COVERAGE:
        return f"{REASON_TEXT[reason]} of {percent_text(population.get('coverage', 1))}"
    return REASON_TEXT[reason]
