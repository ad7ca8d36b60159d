"""Layer slots (docs/explanation/population.md, gate 3), free of Django like hashing.py.

A layer has SLOTS slots; a subject's slot is floor(n_l * SLOTS / 2**64), n_l being
bytes 0 to 7 of SHA-256(layer salt + ":" + subject ID), the variant draw of
hashing.py under the layer's salt, so it is independent of every experiment's
draws. An experiment owns half-open ranges [start, end) of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from assignments.hashing import SCALE, bucket_number

SLOTS = 10_000
# Ranges are [start, end) pairs as the YAML writes them, in any order.
Ranges = tuple[tuple[int, int], ...]


def slot(salt: str, subject_id: str) -> int:
    """The subject's slot in the layer with this salt, 0 to SLOTS - 1, exactly (integers only)."""
    return bucket_number(salt, subject_id) * SLOTS // SCALE


def ranges_problems(value: object) -> list[str]:
    """Why `value` is not a list of slot ranges, as messages naming the item's index; [] when it is one.

    A range is [start, end] with integers 0 <= start < end <= SLOTS; ranges of one
    experiment may not overlap one another (one slot owned twice says nothing new and
    hides a typing mistake).
    """
    if not isinstance(value, list) or not value:
        return ["must be a non-empty list of [start, end] ranges"]
    problems = []
    for index, item in enumerate(value):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(bound, int) and not isinstance(bound, bool) for bound in item)
        ):
            problems.append(f"{index}: must be a list of two integers [start, end]")
        elif not 0 <= item[0] < item[1] <= SLOTS:
            problems.append(f"{index}: needs 0 <= start < end <= {SLOTS}, got [{item[0]}, {item[1]}]")
    if not problems:
        ranges = sorted(tuple(item) for item in value)
        for (start, end), (next_start, next_end) in itertools.pairwise(ranges):
            if next_start < end:
                problems.append(f"ranges [{start}, {end}] and [{next_start}, {next_end}] overlap")
    return problems


def ranges_from(value: Sequence[Sequence[int]]) -> Ranges:
    """Validated ranges (ranges_problems found none) as a hashable value, in the order written."""
    return tuple((start, end) for start, end in value)


def owns(ranges: Ranges, number: int) -> bool:
    return any(start <= number < end for start, end in ranges)


def owned_table(ranges: Ranges) -> bytes:
    """SLOTS bytes, 1 at each slot the ranges own and 0 elsewhere."""
    table = bytearray(SLOTS)
    for start, end in ranges:
        table[start:end] = b"\x01" * (end - start)
    return bytes(table)


def overlap(first: Ranges, second: Ranges) -> tuple[int, int] | None:
    """The first slot range both own, or None when they own no slot in common."""
    for start, end in sorted(first):
        for other_start, other_end in sorted(second):
            low, high = max(start, other_start), min(end, other_end)
            if low < high:
                return low, high
    return None


def covered(ranges: Ranges) -> set[int]:
    """Every slot the ranges own: at most SLOTS numbers, cheap enough for an apply or a page."""
    return {number for start, end in ranges for number in range(start, end)}


def grows(before: Ranges, after: Ranges) -> bool:
    """Whether `after` owns every slot `before` owns: the only change allowed once there are assignments."""
    return covered(before) <= covered(after)
