"""assignments/hashing.py against the assignment formula (docs/reference/api.md).

The pinned numbers and variants below were computed once, outside this code base
(sha256sum and a separate integer implementation), so the function can never drift
without a test failing: every stored assignment in every warehouse depends on them.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assignments.hashing import Allocation, assign_variant, bucket, bucket_number
from tests.helpers.assignments import reference_variant

TWO_WAY = [("control", 0.5), ("green", 0.5)]
THREE_WAY = [("control", 0.2), ("b", 0.3), ("c", 0.5)]

# (salt, subject ID, first 8 bytes of SHA-256 as an integer, variant at 50/50, variant at 20/30/50)
PINNED = [
    ("checkout-button", "u1", 4171964196886966964, "control", "b"),
    ("checkout-button", "u2", 14236139508646608680, "green", "c"),
    ("checkout-button", "user-42", 8271263398871540238, "control", "b"),
    ("checkout-button", " u1", 17934799819741635465, "green", "c"),
    ("checkout-button", "u1 ", 17409128669923828190, "green", "c"),
    ("checkout-button", "U1", 12322635215381282040, "green", "c"),
    ("checkout-button", "\N{GRINNING FACE}", 159647612753464867, "control", "control"),
    ("checkout-button", "e\N{COMBINING ACUTE ACCENT}", 3127440415077548913, "control", "control"),
    ("checkout-button", "\N{LATIN SMALL LETTER E WITH ACUTE}", 12327991870882376131, "green", "c"),
    ("salt-x", "a" * 256, 14487713049993403430, "green", "c"),
    ("pricing", "7", 11216312365187896248, "green", "c"),
    ("pricing", "c-81", 8003913666785868550, "control", "b"),
    ("s\N{LATIN SMALL LETTER A WITH DIAERESIS}lz", "x", 17024880335385618073, "green", "c"),
    ("Checkout-Button", "u1", 11393730790582131356, "green", "c"),
]


@pytest.mark.parametrize(("salt", "subject_id", "number", "two_way", "three_way"), PINNED)
def test_bucket_number__pinned_inputs__match_values_computed_outside_the_code(
    salt, subject_id, number, two_way, three_way
):
    assert bucket_number(salt, subject_id) == number
    assert bucket(salt, subject_id) == Fraction(number, 2**64)
    assert assign_variant(salt, subject_id, TWO_WAY) == two_way
    assert assign_variant(salt, subject_id, THREE_WAY) == three_way


def test_bucket_number__salt_and_id_joined_by_one_colon__only_the_joined_text_counts():
    # Given the plain concatenation of the formula, "a:b" + ":" + "c" == "a" + ":" + "b:c"
    assert bucket_number("a:b", "c") == bucket_number("a", "b:c") == 12749133060491247426


def test_bucket__many_subjects__always_in_the_unit_interval():
    rng = random.Random(7)
    for _ in range(2000):
        u = bucket("salt", str(rng.random()))
        assert 0 <= u < 1


def test_allocation__u_exactly_at_a_cumulative_boundary__takes_the_next_variant():
    # "first variant whose cumulative split > u": at u == 0.25 the first variant no longer qualifies.
    allocation = Allocation([("a", 0.25), ("b", 0.25), ("c", 0.5)])
    assert allocation.choose(2**62 - 1) == "a"
    assert allocation.choose(2**62) == "b"
    assert allocation.choose(2**63 - 1) == "b"
    assert allocation.choose(2**63) == "c"
    assert allocation.choose(0) == "a"
    assert allocation.choose(2**64 - 1) == "c"


def test_allocation__non_dyadic_split__boundary_is_exact_not_float_rounded():
    # Given 0.1 as configured (the double nearest 0.1), u = n / 2**64 compared exactly.
    p, q = (0.1).as_integer_ratio()
    first_above = -(-p * 2**64 // q)  # ceil(0.1 * 2**64): the smallest n with n / 2**64 >= 0.1
    allocation = Allocation([("a", 0.1), ("b", 0.9)])
    assert allocation.choose(first_above - 1) == "a"
    assert allocation.choose(first_above) == "b"


def test_allocation__zero_split__never_chosen_even_at_its_boundary():
    allocation = Allocation([("zero-first", 0.0), ("a", 0.5), ("zero-middle", 0.0), ("b", 0.5), ("zero-last", 0.0)])
    assert allocation.choose(0) == "a"
    assert allocation.choose(2**63 - 1) == "a"
    assert allocation.choose(2**63) == "b"
    assert allocation.choose(2**64 - 1) == "b"
    rng = random.Random(3)
    chosen = {allocation.variant_for("zero", f"subject-{rng.random()}") for _ in range(5000)}
    assert chosen == {"a", "b"}


def test_allocation__splits_sum_just_below_one__top_of_range_falls_back_to_last_non_zero_variant():
    # Given splits summing to 0.9999995 (accepted: within 1e-6) and a zero variant after the last non-zero one
    allocation = Allocation([("a", 0.5), ("b", 0.4999995), ("z", 0.0)])
    # When u lies above every cumulative split
    # Then the last variant with a non-zero split answers, not the zero one after it
    assert allocation.choose(2**64 - 1) == "b"
    assert allocation.choose(2**64 - 2**40) == "b"


def test_allocation__thirds__rounding_gap_below_one_falls_back_to_last_variant():
    third = 1 / 3
    allocation = Allocation([("a", third), ("b", third), ("c", third)])
    # Three copies of the double nearest 1/3 sum to slightly less than 1.
    assert 3 * Fraction(third) < 1
    assert allocation.choose(2**64 - 1) == "c"


def test_allocation__all_to_one_variant__everyone_gets_it():
    allocation = Allocation([("control", 0.0), ("green", 1.0)])
    assert {allocation.variant_for("s", str(i)) for i in range(1000)} == {"green"}


@pytest.mark.parametrize(
    "variants",
    [[], [("a", -0.1), ("b", 1.1)], [("a", 0.0), ("b", 0.0)]],
    ids=["no-variants", "negative-split", "all-zero"],
)
def test_allocation__impossible_splits__refused(variants):
    with pytest.raises(ValueError):
        Allocation(variants)


def test_allocation__many_subjects_and_configurations__equal_the_independent_formula():
    rng = random.Random(20240601)
    configurations = [
        TWO_WAY,
        THREE_WAY,
        [("a", 0.1), ("b", 0.2), ("c", 0.7)],
        [("a", 1 / 3), ("b", 1 / 3), ("c", 1 / 3)],
        [("a", 0.0), ("b", 0.25), ("c", 0.0), ("d", 0.75)],
        [("a", 0.01), ("b", 0.99)],
    ]
    for variants in configurations:
        allocation = Allocation(variants)
        for index in range(3000):
            subject_id = f"{index}-{rng.getrandbits(64):x}"
            assert allocation.variant_for("exp-salt", subject_id) == reference_variant("exp-salt", subject_id, variants)


_valid_text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=256)


@st.composite
def _splits(draw):
    weights = draw(st.lists(st.integers(min_value=0, max_value=1000), min_size=2, max_size=6))
    if not any(weights):
        weights[-1] = 1
    total = sum(weights)
    return [(f"v{index}", weight / total) for index, weight in enumerate(weights)]


@settings(max_examples=300, deadline=None)
@given(salt=_valid_text, subject_id=_valid_text, variants=_splits())
def test_assign_variant__arbitrary_text_and_splits__equals_the_independent_formula(salt, subject_id, variants):
    assert assign_variant(salt, subject_id, variants) == reference_variant(salt, subject_id, variants)
