"""Variant values (spec.valueType and each variant's `value`, docs/reference/resources.md): what each type
takes, and the value as it is stored and served. The YAML reader and the staff console's form check values
here, so both refuse the same ones with the same words."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from assignments.models import Experiment
from core.api.fields import character_problem

STRING_MAX_LENGTH = 1000
INTEGER_BOUND = 2**53
OBJECT_MAX_BYTES = 16 * 1024
OBJECT_MAX_DEPTH = 10
VALUE_TYPES = tuple(Experiment.ValueType.values)
# What a value of each type must be, as a refusal says it after "must be" (and "is required:" when it is missing).
WANTED = {
    Experiment.ValueType.STRING: f"a string of at most {STRING_MAX_LENGTH} characters",
    Experiment.ValueType.BOOLEAN: "true or false",
    Experiment.ValueType.INTEGER: f"an integer from -2^53 to 2^53 (-{INTEGER_BOUND} to {INTEGER_BOUND})",
    Experiment.ValueType.FLOAT: "a finite number",
    Experiment.ValueType.OBJECT: "an object (a mapping)",
}
# A number as JSON writes it: how the staff console reads a number's text.
NUMBER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class ValueRefused(ValueError):
    """The value does not have the type, or is out of its bounds; the message says what it must be."""


def value_checked(value_type: str, value: Any) -> Any:
    """The value as stored and served for `value_type` (an integral float as an integer, an integer as a
    float for `float`); raises ValueRefused."""
    checker = _CHECKERS.get(value_type)
    if checker is None:
        raise ValueRefused(f"the value type must be one of {', '.join(VALUE_TYPES)}")
    return checker(value)


def _string(value: Any) -> str:
    if not isinstance(value, str) or len(value) > STRING_MAX_LENGTH:
        raise ValueRefused(f"must be {WANTED[Experiment.ValueType.STRING]}")
    if problem := character_problem(value):
        raise ValueRefused(problem)
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueRefused(f"must be {WANTED[Experiment.ValueType.BOOLEAN]}")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> int:
    if not _number(value) or value != int(value) or abs(value) > INTEGER_BOUND:
        raise ValueRefused(f"must be {WANTED[Experiment.ValueType.INTEGER]}")
    return int(value)


def _float(value: Any) -> float:
    if not _number(value):
        raise ValueRefused(f"must be {WANTED[Experiment.ValueType.FLOAT]}")
    return float(value)


def _object(value: Any) -> dict:
    if not isinstance(value, dict):
        raise ValueRefused(f"must be {WANTED[Experiment.ValueType.OBJECT]}")
    _json_checked(value, depth=1)
    if len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()) > OBJECT_MAX_BYTES:
        raise ValueRefused(f"must take at most {OBJECT_MAX_BYTES // 1024} KiB as compact JSON")
    return value


def _json_checked(value: Any, *, depth: int) -> None:
    """Refuse what JSON cannot hold (keys other than strings, numbers that are not finite, other types),
    and nesting deeper than OBJECT_MAX_DEPTH."""
    if isinstance(value, (dict, list)):
        if depth > OBJECT_MAX_DEPTH:
            raise ValueRefused(f"must be nested at most {OBJECT_MAX_DEPTH} deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, str):
                shown = json.dumps(key) if key is None or isinstance(key, (bool, int, float)) else repr(key)
                # YAML reads the keys on, off, yes and no as booleans.
                fix = " (quote it in YAML)" if isinstance(key, bool) else ""
                raise ValueRefused(f"must have strings as keys, not {shown}{fix}")
            if isinstance(value, dict):
                _text_checked(key)
            _json_checked(item, depth=depth + 1)
    elif isinstance(value, str):
        _text_checked(value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueRefused("must hold finite numbers only")
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise ValueRefused(f"must hold JSON values only, not {type(value).__name__}")


def _text_checked(text: str) -> None:
    """A string of an object, or one of its keys: what PostgreSQL can store, and shows as it is."""
    if problem := character_problem(text):
        raise ValueRefused(f"{problem} in its strings")


_CHECKERS = {
    Experiment.ValueType.STRING: _string,
    Experiment.ValueType.BOOLEAN: _boolean,
    Experiment.ValueType.INTEGER: _integer,
    Experiment.ValueType.FLOAT: _float,
    Experiment.ValueType.OBJECT: _object,
}
