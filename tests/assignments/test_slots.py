"""Layer slots: the draw and the ranges, as pure functions."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assignments.slots import SLOTS, grows, overlap, owns, ranges_from, ranges_problems, slot


def test_slot__first_8_bytes_scaled_to_10000__floor_in_integers():
    for subject_id in ("u-1", "u-2", "ü", "x" * 256):
        digest = hashlib.sha256(f"layer-salt:{subject_id}".encode()).digest()
        expected = int.from_bytes(digest[:8], "big") * 10000 // 2**64
        assert slot("layer-salt", subject_id) == expected
        assert 0 <= expected < SLOTS


def test_slot__10000_ids__every_slot_range_hit_about_evenly():
    counts = [0] * 10
    for index in range(10_000):
        counts[slot("even", f"s-{index}") // 1000] += 1
    assert all(850 < count < 1150 for count in counts)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "must be a non-empty list"),
        ("0-100", "must be a non-empty list"),
        ([[0, 100, 200]], "0: must be a list of two integers"),
        ([[0, 1.5]], "0: must be a list of two integers"),
        ([[True, 5]], "0: must be a list of two integers"),
        ([[5, 5]], "0: needs 0 <= start < end <= 10000, got [5, 5]"),
        ([[0, 10], [-1, 3]], "1: needs 0 <= start < end <= 10000, got [-1, 3]"),
        ([[9000, 10001]], "0: needs 0 <= start < end <= 10000"),
        ([[0, 100], [50, 150]], "ranges [0, 100] and [50, 150] overlap"),
    ],
)
def test_ranges_problems__bad_ranges__named(value, message):
    problems = ranges_problems(value)
    assert any(problem.startswith(message) for problem in problems), problems


def test_ranges_problems__touching_ranges_and_the_whole_layer__accepted():
    assert ranges_problems([[0, 100], [100, 200]]) == []
    assert ranges_problems([[0, SLOTS]]) == []


def test_overlap__half_open__touching_ranges_share_nothing():
    assert overlap(((0, 100),), ((100, 200),)) is None
    assert overlap(((0, 100), (500, 600)), ((50, 60), (550, 700))) == (50, 60)


def test_owns__start_inclusive_end_exclusive():
    ranges = ranges_from([[10, 20]])
    assert [owns(ranges, number) for number in (9, 10, 19, 20)] == [False, True, True, False]


ranges_strategy = st.lists(
    st.tuples(st.integers(0, SLOTS - 1), st.integers(1, 500)).map(lambda p: (p[0], min(SLOTS, p[0] + p[1]))),
    min_size=1,
    max_size=4,
)


@given(before=ranges_strategy, extra=ranges_strategy)
def test_grows__adding_ranges__grows_and_removing_one_slot__does_not(before, extra):
    before_ranges = tuple(before)
    assert grows(before_ranges, before_ranges + tuple(extra))
    # The first range loses its first slot, which stays owned only if another range holds it too.
    start, end = before_ranges[0]
    shrunk = (*before_ranges[1:], (start + 1, end))
    assert grows(before_ranges, shrunk) == any(s <= start < e for s, e in before_ranges[1:])
