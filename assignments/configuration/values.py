"""Variant values (spec.valueType and each variant's `value`, docs/reference/resources.md): what each type
takes, and the value as it is stored and served. The YAML reader and the staff console's form check values
here, so both refuse the same ones with the same words."""

from __future__ import annotations

import json
import math
from typing import Any

from assignments.models import Experiment
from core.api.fields import character_problem

STRING_MAX_LENGTH = 1000
INTEGER_BOUND = 2**53
OBJECT_MAX_BYTES = 16 * 1024
OBJECT_MAX_DEPTH = 10
VALUE_TYPES = tuple(Experiment.ValueType.values)


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
        raise ValueRefused(f"must be a string of at most {STRING_MAX_LENGTH} characters")
    if problem := character_problem(value):
        raise ValueRefused(problem)
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueRefused("must be true or false")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> int:
    if not _number(value) or value != int(value) or abs(value) > INTEGER_BOUND:
        raise ValueRefused(f"must be an integer from -2^53 to 2^53 (-{INTEGER_BOUND} to {INTEGER_BOUND})")
    return int(value)


def _float(value: Any) -> float:
    if not _number(value):
        raise ValueRefused("must be a finite number")
    return float(value)


def _object(value: Any) -> dict:
    if not isinstance(value, dict):
        raise ValueRefused("must be an object (a mapping)")
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
                raise ValueRefused(f"must have strings as keys, not {key!r}")
            _json_checked(item, depth=depth + 1)
    elif isinstance(value, str):
        if problem := character_problem(value):
            raise ValueRefused(f"must hold text that {problem.removeprefix('must ')}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueRefused("must hold finite numbers only")
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise ValueRefused(f"must hold JSON values only, not {type(value).__name__}")


_CHECKERS = {
    Experiment.ValueType.STRING: _string,
    Experiment.ValueType.BOOLEAN: _boolean,
    Experiment.ValueType.INTEGER: _integer,
    Experiment.ValueType.FLOAT: _float,
    Experiment.ValueType.OBJECT: _object,
}

