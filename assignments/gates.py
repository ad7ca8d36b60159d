"""Who enters an experiment: the gates of docs/explanation/population.md, as pure functions.

They decide only for a subject without a stored assignment, from the cached
configuration, the request's attributes and the time, and they run no SQL: the
hot path evaluates them between the statement that reads the stored
assignments and the one that inserts the new ones. In order:

1. enrollment window      enrollment_not_started, enrollment_closed
2. holdouts               held_out
3. layer                  layer_excluded
4. targeting              attributes_missing, not_targeted
5. following links        a linked identifier's variant skips gate 6 only
6. coverage               outside_coverage
7. the variant formula    hashing.py

`Gates.screen` is gates 1 to 4, given gate 2's answer: holdout memberships are
stored rows, so the hot path reads or makes them (only for subjects that gate 1
lets through) in the statements it runs anyway. `Gates.covers` is gate 6; the
hot path follows links in between, because that needs the link table. `decide`
runs them all for one subject, given what following links found, for the staff
console's previews.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Generic, TypeVar

from assignments.hashing import SCALE, Allocation, draws, threshold
from assignments.slots import Ranges, owned_table, ranges_from, slot

V = TypeVar("V")

ENROLLMENT_NOT_STARTED = "enrollment_not_started"
ENROLLMENT_CLOSED = "enrollment_closed"
HELD_OUT = "held_out"
LAYER_EXCLUDED = "layer_excluded"
ATTRIBUTES_MISSING = "attributes_missing"
NOT_TARGETED = "not_targeted"
OUTSIDE_COVERAGE = "outside_coverage"
# The gates' reasons in the order that decides when several apply (the gates' own order).
REASONS = (
    ENROLLMENT_NOT_STARTED,
    ENROLLMENT_CLOSED,
    HELD_OUT,
    LAYER_EXCLUDED,
    ATTRIBUTES_MISSING,
    NOT_TARGETED,
    OUTSIDE_COVERAGE,
)

STRING, NUMBER, BOOLEAN, VERSION = "string", "number", "boolean", "version"
ATTRIBUTE_TYPES = (STRING, NUMBER, BOOLEAN, VERSION)
# Operator -> the attribute types it may be used with.
OPERATORS: dict[str, tuple[str, ...]] = {
    "equals": ATTRIBUTE_TYPES,
    "in": (STRING, NUMBER),
    "notIn": (STRING, NUMBER),
    "gt": (NUMBER, VERSION),
    "gte": (NUMBER, VERSION),
    "lt": (NUMBER, VERSION),
    "lte": (NUMBER, VERSION),
    "exists": ATTRIBUTE_TYPES,
}
LIST_OPERATORS = ("in", "notIn")
MAX_LIST_ITEMS = 100
MAX_CONDITIONS = 20

ATTRIBUTE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
_attribute_name = re.compile(ATTRIBUTE_NAME_PATTERN)
MAX_ATTRIBUTES = 50
ATTRIBUTE_STRING_MAX_LENGTH = 256
# ASCII digits only: \d would also take other scripts' digits, which int() reads but nobody means.
_version = re.compile(r"[0-9]+(?:\.[0-9]+){0,3}")
VERSION_PARTS = 4
_control = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


# The checks a batch repeats for every subject (the same few names, many equal values) are
# memoised: a 1000-subject batch with attributes costs a fraction of what checking each again
# would (bench/results/gates.md). The bounds keep a stream of distinct values from growing them.
CHECK_CACHE_SIZE = 4096


@lru_cache(maxsize=CHECK_CACHE_SIZE)
def _is_name(value: str) -> bool:
    return _attribute_name.fullmatch(value) is not None


def is_attribute_name(value: object) -> bool:
    return isinstance(value, str) and _is_name(value)


@lru_cache(maxsize=CHECK_CACHE_SIZE)
def _version_of(value: str) -> tuple[int, ...] | None:
    if _version.fullmatch(value) is None:
        return None
    parts = [int(part) for part in value.split(".")]
    return tuple(parts + [0] * (VERSION_PARTS - len(parts)))


def version_parse(value: object) -> tuple[int, ...] | None:
    """A version (1 to 4 dot-separated non-negative integers) as 4 numbers, missing parts 0; None if it is not one."""
    return _version_of(value) if isinstance(value, str) else None


def is_number(value: object) -> bool:
    """A finite JSON or YAML number; booleans are not numbers here, although Python counts them as ints."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, float) or math.isfinite(value)


@lru_cache(maxsize=CHECK_CACHE_SIZE)
def _string_problem(value: str) -> str | None:
    if len(value) > ATTRIBUTE_STRING_MAX_LENGTH:
        return f"must be at most {ATTRIBUTE_STRING_MAX_LENGTH} characters"
    if _control.search(value):
        return "must not contain control characters"
    return None


def value_problem(value: object) -> str | None:
    """Why a value cannot be an attribute's value (a string of at most 256 characters without control
    characters, a finite number or a boolean), or None."""
    if isinstance(value, str):
        return _string_problem(value)
    if isinstance(value, bool) or is_number(value):
        return None
    if isinstance(value, (int, float)):
        return "must be a finite number"
    return "must be a string, a finite number or a boolean"


def attribute_problem(name: object, value: object) -> str | None:
    """Why an entry cannot be an attribute (its name, else its value), or None."""
    if not is_attribute_name(name):
        return f"the name must match {ATTRIBUTE_NAME_PATTERN}"
    return value_problem(value)


def typed_value(value: object, attribute_type: str) -> Any:
    """The value as the gates compare it (a version as its numbers), or None if it is not of that type."""
    if attribute_type == STRING:
        return value if isinstance(value, str) else None
    if attribute_type == NUMBER:
        return value if is_number(value) else None
    if attribute_type == BOOLEAN:
        return value if isinstance(value, bool) else None
    return version_parse(value)


# Whether a value has the type: typed_value's verdict without building the value, for every sent attribute.
_TYPE_CHECKS = {
    STRING: lambda value: isinstance(value, str),
    NUMBER: is_number,
    BOOLEAN: lambda value: isinstance(value, bool),
    VERSION: lambda value: version_parse(value) is not None,
}

TYPE_WORDS = {
    STRING: "a string",
    NUMBER: "a number",
    BOOLEAN: "true or false",
    VERSION: "a version (1 to 4 dot-separated non-negative integers, such as 2.10.1)",
}


def _number_for_version(value: object, attribute_type: str) -> bool:
    """A version written as a number: JSON and YAML read 2.10 as the number 2.1, so it must be a string."""
    return attribute_type == VERSION and is_number(value)


def attribute_problems(attributes: Mapping[str, object], declared: Mapping[str, str]) -> dict[str, str]:
    """Attribute name -> why its value does not have the type declared for it; undeclared names are ignored."""
    problems = {}
    for name, value in attributes.items():
        attribute_type = declared.get(name)
        if attribute_type is not None and not _TYPE_CHECKS[attribute_type](value):
            problems[name] = f"must be {TYPE_WORDS[attribute_type]}, as the subject type declares"
            if _number_for_version(value, attribute_type):
                problems[name] += f'; send it as a string ("{value}"): a number loses the zeros of 2.10'
    return problems


@dataclass(frozen=True)
class Condition:
    """{attribute: NAME, OPERATOR: VALUE}, its value already in the attribute type's form."""

    attribute: str
    operator: str
    value: Any

    def holds(self, attributes: Mapping[str, object], attribute_type: str) -> bool:
        if self.attribute not in attributes:
            return self.operator == "notIn" or (self.operator == "exists" and self.value is False)
        if self.operator == "exists":
            return self.value is True
        sent = typed_value(attributes[self.attribute], attribute_type)
        if sent is None:
            # A value of another type than declared (the declaration changed within the
            # subject-type cache's lifetime): it matches nothing.
            return False
        if self.operator == "equals":
            return sent == self.value
        if self.operator == "in":
            return sent in self.value
        if self.operator == "notIn":
            return sent not in self.value
        if self.operator == "gt":
            return sent > self.value
        if self.operator == "gte":
            return sent >= self.value
        if self.operator == "lt":
            return sent < self.value
        return sent <= self.value


@dataclass(frozen=True)
class AnyOf:
    conditions: tuple[Condition, ...]


Clause = Condition | AnyOf


def condition_from(document: Mapping[str, Any], attribute_type: str) -> Condition:
    """A condition of a targeting document (`{attribute: NAME, OPERATOR: VALUE}`) ready to evaluate,
    for an attribute of the given type; the document has been validated (configuration/resources.py and
    configuration/apply.py)."""
    (operator,) = (name for name in document if name != "attribute")
    value = document[operator]
    if operator in LIST_OPERATORS:
        value = frozenset(typed_value(item, attribute_type) for item in value)
    elif operator != "exists":
        value = typed_value(value, attribute_type)
    return Condition(attribute=document["attribute"], operator=operator, value=value)


@dataclass(frozen=True)
class Targeting:
    """Conditions that must all hold, with the declared type of each attribute they name."""

    clauses: tuple[Clause, ...]
    types: Mapping[str, str]
    # Each clause as its conditions, each with its attribute's type: what `reason` walks.
    _compiled: tuple[tuple[tuple[Condition, str], ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = tuple(
            tuple(
                (condition, self.types[condition.attribute])
                for condition in (clause.conditions if isinstance(clause, AnyOf) else (clause,))
            )
            for clause in self.clauses
        )
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def from_documents(cls, documents: Sequence[Mapping[str, Any]], types: Mapping[str, str]) -> Targeting:
        clauses: list[Clause] = []
        for document in documents:
            if "anyOf" in document:
                inner = document["anyOf"]
                clauses.append(AnyOf(tuple(condition_from(item, types[item["attribute"]]) for item in inner)))
            else:
                clauses.append(condition_from(document, types[document["attribute"]]))
        return cls(clauses=tuple(clauses), types=dict(types))

    def attribute_names(self) -> tuple[str, ...]:
        """The attributes the conditions name, each once, in the order they first appear."""
        names = (
            condition.attribute
            for clause in self.clauses
            for condition in (clause.conditions if isinstance(clause, AnyOf) else (clause,))
        )
        return tuple(dict.fromkeys(names))

    def reason(self, attributes: Mapping[str, object]) -> str | None:
        """None when every clause holds; else attributes_missing when every clause that failed names
        only attributes that were not sent (an anyOf when all of its conditions do), not_targeted otherwise."""
        failed = False
        # Plain loops over the clauses as compiled: this runs for every new subject of a batch.
        for conditions in self._compiled:
            for condition, attribute_type in conditions:
                if condition.holds(attributes, attribute_type):
                    break
            else:
                for condition, _ in conditions:
                    if condition.attribute in attributes:
                        return NOT_TARGETED
                failed = True
        return ATTRIBUTES_MISSING if failed else None


@dataclass(frozen=True)
class LayerSlots:
    """The slots an experiment owns in its layer, and the layer's salt for the slot draw (slots.py)."""

    salt: str
    ranges: Ranges
    # One byte per slot, 1 where the experiment owns it: a batch looks each subject's slot up
    # instead of walking the ranges (a tenth of a layered batch's worker CPU did).
    owned: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "owned", owned_table(self.ranges))

    def owns(self, subject_id: str) -> bool:
        return self.owned[slot(self.salt, subject_id)] == 1


@dataclass(frozen=True)
class Gates:
    """An experiment's gates as its current cohort configures them; the default lets everyone in.

    Holdouts (gate 2) are not among them: their memberships are stored rows, which
    the caller reads or makes and passes to `screen`.
    """

    start_at: datetime | None = None
    stop_at: datetime | None = None
    layer: LayerSlots | None = None
    targeting: Targeting | None = None
    # A subject is covered when its coverage draw is below this: ceil(coverage * 2**64).
    coverage_threshold: int = SCALE
    # Whether any gate can stop anyone: without one the hot path skips them all.
    any: bool = field(init=False)

    def __post_init__(self) -> None:
        gated = (
            self.start_at is not None
            or self.stop_at is not None
            or self.layer is not None
            or self.targeting is not None
            or self.coverage_threshold < SCALE
        )
        object.__setattr__(self, "any", gated)

    @classmethod
    def configured(
        cls,
        *,
        start_at: datetime | None,
        stop_at: datetime | None,
        layer: LayerSlots | None = None,
        targeting: Sequence[Mapping[str, Any]] | None,
        attribute_types: Mapping[str, str],
        coverage: float,
    ) -> Gates:
        return cls(
            start_at=start_at,
            stop_at=stop_at,
            layer=layer,
            targeting=Targeting.from_documents(targeting, attribute_types) if targeting else None,
            coverage_threshold=threshold(coverage),
        )

    @classmethod
    def stored(
        cls,
        *,
        start_at: datetime | None,
        stop_at: datetime | None,
        layer_salt: str | None,
        slots: Sequence[Sequence[int]] | None,
        targeting: Sequence[Mapping[str, Any]] | None,
        attributes: Sequence[Mapping[str, str]],
        coverage: float,
    ) -> Gates:
        """The gates from an experiment's stored columns, its layer's salt and its subject type's attributes."""
        return cls.configured(
            start_at=start_at,
            stop_at=stop_at,
            layer=None if layer_salt is None else LayerSlots(salt=layer_salt, ranges=ranges_from(slots)),
            targeting=targeting,
            attribute_types={attribute["name"]: attribute["type"] for attribute in attributes},
            coverage=coverage,
        )

    def window_reason(self, now: datetime) -> str | None:
        """Gate 1: the start is inclusive, the stop exclusive."""
        if self.start_at is not None and now < self.start_at:
            return ENROLLMENT_NOT_STARTED
        if self.stop_at is not None and now >= self.stop_at:
            return ENROLLMENT_CLOSED
        return None

    def layer_reason(self, subject_id: str) -> str | None:
        """Gate 3: only the experiment that owns the subject's slot of the layer takes it."""
        if self.layer is None or self.layer.owns(subject_id):
            return None
        return LAYER_EXCLUDED

    def targeting_reason(self, attributes: Mapping[str, object]) -> str | None:
        """Gate 4; also what still applies to a declared winner."""
        return None if self.targeting is None else self.targeting.reason(attributes)

    def screen(
        self, subject_id: str, attributes: Mapping[str, object], now: datetime, *, held_out: bool = False
    ) -> str | None:
        """Gates 1 to 4 for a subject without a stored assignment: the reason the first that stops it
        names, or None. `held_out` is gate 2: whether the subject is a held_out member of an active
        holdout covering the experiment."""
        return self.window_reason(now) or self.screen_open(subject_id, attributes, held_out=held_out)

    def screen_open(self, subject_id: str, attributes: Mapping[str, object], *, held_out: bool = False) -> str | None:
        """Gates 2 to 4, for a batch whose enrollment window (the same for all of it) is open."""
        if held_out:
            return HELD_OUT
        return self.layer_reason(subject_id) or self.targeting_reason(attributes)

    def covers(self, coverage_draw: int) -> bool:
        """Gate 6, given the subject's coverage draw (hashing.draws)."""
        return coverage_draw < self.coverage_threshold


@dataclass(frozen=True)
class Decision(Generic[V]):
    """What the gates and the formula make of one subject without a stored assignment."""

    # The reason of the first gate that stops the subject; None when it enters.
    reason: str | None = None
    # The variant it enters with.
    variant: V | None = None
    # True when that variant is a linked identifier's, carried over past the coverage gate.
    linked: bool = False
    # The attributes the targeting reads, when the subject's are unknown: gate 4 is then
    # undecided, and `reason` and `variant` say what follows if the targeting lets it in.
    depends_on: tuple[str, ...] = ()


def decide(
    gates: Gates,
    allocation: Allocation[V],
    *,
    salt: str,
    subject_id: str,
    attributes: Mapping[str, object] | None,
    now: datetime,
    linked: V | None = None,
    held_out: bool = False,
) -> Decision[V]:
    """The gates in their order, then the variant formula, for one subject of an active experiment that
    has no stored assignment in it; `attributes` None when they are unknown, `linked` the variant a
    linked identifier would carry over (assignments/linking.py), if the experiment follows links,
    `held_out` whether it is a held_out member of an active covering holdout."""
    depends_on: tuple[str, ...] = ()
    if attributes is None:
        reason = gates.window_reason(now) or (HELD_OUT if held_out else None) or gates.layer_reason(subject_id)
        if reason is None and gates.targeting is not None:
            depends_on = gates.targeting.attribute_names()
    else:
        reason = gates.screen(subject_id, attributes, now, held_out=held_out)
    if reason is not None:
        return Decision(reason=reason)
    return entered(gates, allocation, salt=salt, subject_id=subject_id, linked=linked, depends_on=depends_on)


def entered(
    gates: Gates,
    allocation: Allocation[V],
    *,
    salt: str,
    subject_id: str,
    linked: V | None = None,
    depends_on: tuple[str, ...] = (),
) -> Decision[V]:
    """Gates 5 to 7 for a subject that gates 1 to 4 let through: a linked identifier's variant (skipping
    coverage), else the coverage gate, then the variant formula. The hot path runs gates 1 to 4 for a whole
    batch first, since only the subjects they let through need the link walk's statement."""
    if linked is not None:
        return Decision(variant=linked, linked=True, depends_on=depends_on)
    variant = covered_variant(gates, allocation, salt=salt, subject_id=subject_id)
    if variant is None:
        return Decision(reason=OUTSIDE_COVERAGE, depends_on=depends_on)
    return Decision(variant=variant, depends_on=depends_on)


def covered_variant(gates: Gates, allocation: Allocation[V], *, salt: str, subject_id: str) -> V | None:
    """Gates 6 and 7 for a subject not carried over by a link: its variant if the coverage gate lets it in,
    else None; both draws from the one digest."""
    variant_draw, coverage_draw = draws(salt, subject_id)
    return allocation.choose(variant_draw) if gates.covers(coverage_draw) else None


def _condition_problems(document: Mapping[str, Any], path: str, types: Mapping[str, str]) -> list[tuple[str, str]]:
    name = document["attribute"]
    attribute_type = types.get(name)
    if attribute_type is None:
        declared = ", ".join(types) or "none"
        return [(f"{path}.attribute", f"names no attribute the subject type declares: {name!r} (declared: {declared})")]
    (operator,) = (key for key in document if key != "attribute")
    if attribute_type not in OPERATORS[operator]:
        allowed = ", ".join(op for op, op_types in OPERATORS.items() if attribute_type in op_types)
        message = f"cannot be used with {attribute_type} attribute {name!r}; its operators: {allowed}"
        return [(f"{path}.{operator}", message)]
    if operator == "exists":
        return []
    values = document[operator] if operator in LIST_OPERATORS else [document[operator]]
    for index, value in enumerate(values):
        if typed_value(value, attribute_type) is None:
            where = f"{path}.{operator}.{index}" if operator in LIST_OPERATORS else f"{path}.{operator}"
            message = f"must be {TYPE_WORDS[attribute_type]}: {name!r} is a {attribute_type} attribute"
            if _number_for_version(value, attribute_type):
                message += f"; quote it ('{value}'): unquoted, YAML reads 2.10 as the number 2.1"
            return [(where, message)]
    return []


def targeting_problems(documents: Sequence[Mapping[str, Any]], types: Mapping[str, str]) -> list[tuple[str, str]]:
    """(field path, why) for each condition of structurally valid targeting documents that names an
    attribute the subject type does not declare, uses an operator its type does not allow, or compares
    with a value of another type."""
    problems = []
    for index, document in enumerate(documents):
        path = f"spec.targeting.{index}"
        if "anyOf" in document:
            for inner, condition in enumerate(document["anyOf"]):
                problems += _condition_problems(condition, f"{path}.anyOf.{inner}", types)
        else:
            problems += _condition_problems(document, path, types)
    return problems


def targeting_attributes(documents: Sequence[Mapping[str, Any]]) -> set[str]:
    """The attribute names targeting documents use."""
    names = set()
    for document in documents:
        for condition in document.get("anyOf", [document]):
            names.add(condition["attribute"])
    return names
