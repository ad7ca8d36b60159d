"""assignments/hashing.py against the assignment formula (docs/reference/api.md), and its draws: exact,
recomputable in SQL, monotone in coverage, independent of each other, and 20,000 new subjects landing in the
variants as configured.

The pinned numbers and variants below were computed once, outside this code base
(sha256sum and a separate integer implementation), so the function can never drift
without a test failing: every stored assignment in every warehouse depends on them.

The SQL is read from docs/reference/sql-recipes.md ("Recomputing the draws in SQL"), so the page and what
these tests run cannot drift apart: the page's query is checked against the service's own answers.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from fractions import Fraction
from statistics import NormalDist

import pytest
from django.db import connection
from hypothesis import example, given, settings
from hypothesis import strategies as st

from assignments.assigning import assign_subjects
from assignments.console.statistics import chi_square_sf, sample_ratio_test
from assignments.gates import OUTSIDE_COVERAGE, Gates
from assignments.hashing import SCALE, Allocation, assign_variant, bucket, bucket_number, draws, threshold
from assignments.models import Assignment, Experiment
from tests.helpers import resources
from tests.helpers.assignments import reference_variant
from tests.helpers.draws import ALPHA, BLOCK, DOC, SPLITS, doc_section, independence_chi_square, odd_subject_ids
from tests.helpers.resources import apply_resources, experiment, split_variants, subject_type

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


# --- the variant and coverage draws: exact, recomputable in SQL, monotone in coverage, independent ---


SECTION = "## Recomputing the draws in SQL"
SALT = "Draws-Sälz"
COVERAGE = 0.3


def doc_sql() -> tuple[str, str]:
    """The page's two SQL blocks: the example's inputs, then the query."""
    blocks = [text for language, text in BLOCK.findall(doc_section(SECTION)) if language == "sql"]
    assert len(blocks) == 2, f"{DOC.name}: '{SECTION}' needs two sql blocks, the inputs and the query"
    return blocks[0], blocks[1]


def doc_output() -> list[tuple[str, bool, str | None]]:
    """The rows the page says the query prints for its example's inputs (psql's aligned table)."""
    (table,) = [text for language, text in BLOCK.findall(doc_section(SECTION)) if not language]
    rows = []
    for line in table.splitlines()[2:]:
        subject_id, covered, variant_id = (cell.strip() for cell in line.split("|"))
        rows.append((subject_id, covered == "t", variant_id or None))
    return rows


def sql_draws(subject_ids: list[str], *, salt: str, coverage: float, splits: list[tuple[str, float]]) -> dict:
    """The page's query run in this PostgreSQL database on the given inputs: subject ID -> (covered, variant)."""
    _, query = doc_sql()
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS pg_temp.experiment, pg_temp.variant, pg_temp.subject")
        cursor.execute("CREATE TEMP TABLE experiment (salt text, coverage float8)")
        cursor.execute("CREATE TEMP TABLE variant (position integer, variant_id text, split float8)")
        cursor.execute("CREATE TEMP TABLE subject (subject_id text)")
        cursor.execute("INSERT INTO experiment VALUES (%s, %s)", [salt, coverage])
        for position, (variant_id, split) in enumerate(splits, start=1):
            cursor.execute("INSERT INTO variant VALUES (%s, %s, %s)", [position, variant_id, split])
        cursor.execute("INSERT INTO subject SELECT unnest(%s::text[])", [subject_ids])
        cursor.execute(query)
        return {subject_id: (covered, variant_id) for subject_id, covered, variant_id in cursor.fetchall()}


def python_draws(subject_ids: list[str], *, salt: str, coverage: float, splits: list[tuple[str, float]]) -> dict:
    """The same from assignments/hashing.py."""
    allocation = Allocation(splits)
    answer = {}
    for subject_id in subject_ids:
        variant_draw, coverage_draw = draws(salt, subject_id)
        covered = coverage_draw < threshold(coverage)
        answer[subject_id] = (covered, allocation.choose(variant_draw) if covered else None)
    return answer


def doubles_around(draw: int) -> tuple[float, float]:
    """The two neighbouring binary doubles x < y with ceil(x * 2**64) <= draw < ceil(y * 2**64): at x a subject
    with this draw is just out, at y just in."""
    x = draw / SCALE
    while threshold(x) > draw:
        x = math.nextafter(x, 0)
    while threshold(math.nextafter(x, 1)) <= draw:
        x = math.nextafter(x, 1)
    return x, math.nextafter(x, 1)


@pytest.mark.postgres
def test_draws_sql__over_10000_subject_ids_through_the_service__covered_and_variants_as_the_service_answered(db):
    # Given an active experiment with coverage and three uneven splits
    apply_resources(
        subject_type("user"),
        experiment("draws", salt=SALT, coverage=COVERAGE, variants=split_variants(SPLITS)),
    )
    subject_ids = [f"subject-{number}" for number in range(10_000)] + odd_subject_ids()

    # When the service answers every subject, a thousand per request
    assignments: dict[str, str] = {}
    excluded: dict[str, str] = {}
    for start in range(0, len(subject_ids), 1000):
        answer = assign_subjects(experiment_id="draws", subject_ids=subject_ids[start : start + 1000])
        assignments.update(answer.assignments)
        excluded.update(answer.excluded)

    # Then the page's SQL, run in PostgreSQL on the configuration as stored, says who is covered and their variant
    stored_experiment = Experiment.objects.get(key="draws")
    stored_splits = list(stored_experiment.variants.order_by("position").values_list("key", "split"))
    computed = sql_draws(
        subject_ids, salt=stored_experiment.salt, coverage=stored_experiment.coverage, splits=stored_splits
    )
    covered = {subject_id for subject_id, (is_covered, _) in computed.items() if is_covered}
    assert len(computed) == len(subject_ids)
    assert covered == set(assignments) - set(excluded)
    assert set(excluded.values()) == {OUTSIDE_COVERAGE}
    assert {assignments[subject_id] for subject_id in excluded} == {"control"}
    assert {subject_id: assignments[subject_id] for subject_id in covered} == {
        subject_id: computed[subject_id][1] for subject_id in covered
    }
    # And exactly the covered subjects are stored, each with its variant
    stored = dict(Assignment.objects.filter(experiment__key="draws").values_list("subject_id", "variant__key"))
    assert stored == {subject_id: computed[subject_id][1] for subject_id in covered}
    # And the data set is not degenerate: both sides of the coverage and every variant are there
    assert 0.25 < len(covered) / len(subject_ids) < 0.35
    assert set(stored.values()) == {"control", "b", "c"}


@pytest.mark.postgres
def test_draws_sql__the_pages_example__prints_what_the_page_shows(db):
    # Given the page's example inputs
    inputs, query = doc_sql()
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS pg_temp.experiment, pg_temp.variant, pg_temp.subject")
        cursor.execute(inputs)

        # When the page's query runs on them
        cursor.execute(query)
        rows = cursor.fetchall()

    # Then it prints the page's table, which is what assignments/hashing.py says too
    assert rows == doc_output()
    computed = python_draws(
        ["p-1", "p-2", "p-3"], salt="annual-pricing", coverage=0.5, splits=[("control", 0.5), ("annual", 0.5)]
    )
    assert [(subject_id, *computed[subject_id]) for subject_id, _, _ in rows] == rows


@pytest.mark.postgres
@pytest.mark.parametrize("subject_id", ["u1", "subject-7", "\N{GRINNING FACE}", "a:b"])
def test_draws_sql__coverage_one_binary_step_either_side_of_a_draw__out_below_in_above_as_the_service(subject_id, db):
    # Given the two neighbouring doubles between which the subject's coverage draw lies
    _, coverage_draw = draws(SALT, subject_id)
    below, above = doubles_around(coverage_draw)

    # Then the page's SQL leaves the subject out at the lower and lets it in at the upper
    assert sql_draws([subject_id], salt=SALT, coverage=below, splits=SPLITS)[subject_id][0] is False
    assert sql_draws([subject_id], salt=SALT, coverage=above, splits=SPLITS)[subject_id][0] is True

    # And so does the service, read from YAML: out at the lower, in once raised to the upper
    apply_resources(
        subject_type("user"), experiment("edge", salt=SALT, coverage=below, variants=split_variants(SPLITS))
    )
    assert assign_subjects(experiment_id="edge", subject_ids=[subject_id]).excluded == {subject_id: OUTSIDE_COVERAGE}
    apply_resources(experiment("edge", salt=SALT, coverage=above, variants=split_variants(SPLITS)))
    assert assign_subjects(experiment_id="edge", subject_ids=[subject_id]).excluded == {}
    assert Assignment.objects.filter(experiment__key="edge", subject_id=subject_id).exists()


@pytest.mark.postgres
@pytest.mark.parametrize("subject_id", ["u1", "subject-7", "\N{GRINNING FACE}", "a:b"])
def test_draws_sql__first_split_one_binary_step_either_side_of_a_draw__variant_flips_there_as_in_python(subject_id, db):
    # Given a first split a single binary step below, then above, the subject's variant draw
    variant_draw, _ = draws(SALT, subject_id)
    below, above = doubles_around(variant_draw)

    # Then the page's SQL and assignments/hashing.py both put the subject in the second variant, then the first
    for split, variant in ((below, "second"), (above, "first")):
        splits = [("first", split), ("second", 1 - split)]
        computed = sql_draws([subject_id], salt=SALT, coverage=1.0, splits=splits)
        assert computed == python_draws([subject_id], salt=SALT, coverage=1.0, splits=splits)
        assert computed[subject_id] == (True, variant)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("coverage", "covered_share"),
    [(0.0, 0), (5e-324, 0), (2.0**-1022, 0), (-0.0, 0), (1.0, 1)],
)
def test_draws_sql__edge_coverages__nobody_or_everybody_as_in_python(coverage, covered_share, db):
    subject_ids = [f"edge-{number}" for number in range(500)]

    computed = sql_draws(subject_ids, salt=SALT, coverage=coverage, splits=SPLITS)

    assert computed == python_draws(subject_ids, salt=SALT, coverage=coverage, splits=SPLITS)
    assert sum(covered for covered, _ in computed.values()) == covered_share * len(subject_ids)


NEIGHBOURS = st.floats(min_value=0, max_value=1).map(lambda a: (a, min(math.nextafter(a, 1), 1.0)))
ORDERED = st.tuples(st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1)).map(sorted)


@given(salt=st.text(min_size=1), subject_id=st.text(min_size=1), coverages=st.one_of(NEIGHBOURS, ORDERED))
@example(salt="s", subject_id="u1", coverages=(0.0, 1.0))
@example(salt="s", subject_id="u1", coverages=(0.0, 5e-324))
@example(salt="s", subject_id="u1", coverages=(math.nextafter(1.0, 0), 1.0))
def test_coverage__raised_from_a_to_b__whoever_was_covered_at_a_is_covered_at_b(salt, subject_id, coverages):
    low, high = coverages
    _, coverage_draw = draws(salt, subject_id)

    assert threshold(low) <= threshold(high)
    if coverage_draw < threshold(low):
        assert coverage_draw < threshold(high)
        assert gates_at(high).covers(coverage_draw)
    assert gates_at(low).covers(coverage_draw) == (coverage_draw < threshold(low))


@given(coverage_draw=st.integers(min_value=0, max_value=SCALE - 1), coverages=st.one_of(NEIGHBOURS, ORDERED))
@example(coverage_draw=0, coverages=(0.0, 5e-324))
@example(coverage_draw=SCALE - 1, coverages=(math.nextafter(1.0, 0), 1.0))
def test_gates_covers__any_draw_raised_from_a_to_b__covered_at_a_implies_covered_at_b(coverage_draw, coverages):
    low, high = coverages

    if gates_at(low).covers(coverage_draw):
        assert gates_at(high).covers(coverage_draw)


def gates_at(coverage: float) -> Gates:
    return Gates.configured(start_at=None, stop_at=None, targeting=None, attribute_types={}, coverage=coverage)


def test_gates_covers__coverage_0_and_1__nobody_and_everybody_whatever_the_draw():
    for coverage_draw in (0, 1, SCALE // 2, SCALE - 1):
        assert not gates_at(0.0).covers(coverage_draw)
        assert gates_at(1.0).covers(coverage_draw)


SUBJECTS = 200_000


@pytest.fixture(scope="module")
def population() -> list[tuple[int, int]]:
    """The variant and coverage draws of 200,000 fixed subject IDs."""
    return [draws("independence", f"subject-{number}") for number in range(SUBJECTS)]


def test_draws__200000_subjects__coverage_deciles_independent_of_the_variant(population):
    # Given each subject's coverage decile and variant
    allocation = Allocation(SPLITS)
    table = [[0] * len(SPLITS) for _ in range(10)]
    columns = {variant: index for index, (variant, _) in enumerate(SPLITS)}
    for variant_draw, coverage_draw in population:
        table[coverage_draw * 10 // SCALE][columns[allocation.choose(variant_draw)]] += 1

    # Then no decile leans towards a variant (a coverage draw taken from the variant's bytes scores in the tens
    # of thousands here)
    statistic, degrees_of_freedom = independence_chi_square(table)
    assert degrees_of_freedom == 18
    assert chi_square_sf(statistic, degrees_of_freedom) > ALPHA, table


def test_draws__200000_subjects_at_coverage_0_3__covered_share_binomial_and_split_as_configured(population):
    # Given the subjects that coverage 0.3 lets in
    allocation = Allocation(SPLITS)
    covered = [variant_draw for variant_draw, coverage_draw in population if gates_at(COVERAGE).covers(coverage_draw)]

    # Then their share is the coverage within the binomial bound of ALPHA, two-sided
    z = NormalDist().inv_cdf(1 - ALPHA / 2)
    assert abs(len(covered) - SUBJECTS * COVERAGE) < z * math.sqrt(SUBJECTS * COVERAGE * (1 - COVERAGE))
    # And they are split as configured, as if there were no coverage
    counts = Counter(allocation.choose(variant_draw) for variant_draw in covered)
    test = sample_ratio_test(
        observed=[counts[variant] for variant, _ in SPLITS], expected_shares=[split for _, split in SPLITS]
    )
    assert test.p_value > ALPHA, counts


# --- 20,000 new subjects land in the variants as configured, each where the formula puts it ---


NEW_SUBJECTS = 20_000
# Chi-square with 2 degrees of freedom exceeds 27.63 with probability 1e-6 under the right formula;
# a formula that swapped, dropped or mis-accumulated the splits scores in the thousands.
CHI_SQUARE_LIMIT = -2 * math.log(1e-6)

CONFIG = (
    resources.subject_type("user"),
    resources.experiment(
        "three-way",
        salt="distribution-test",
        variants=[
            resources.variant("control", 0.2, control=True),
            resources.variant("b", 0.3),
            resources.variant("c", 0.5),
        ],
    ),
)


def test_assign__20000_new_subjects__split_as_configured_and_equal_to_the_formula(db):
    apply_resources(*CONFIG)
    subject_ids = [f"user-{index:05d}" for index in range(NEW_SUBJECTS)]

    answered: dict[str, str] = {}
    for start in range(0, NEW_SUBJECTS, 1000):
        answered.update(
            assign_subjects(experiment_id="three-way", subject_ids=subject_ids[start : start + 1000]).assignments
        )

    # Each subject is where the independent computation of the formula puts it, in the answer and in the table
    expected = {subject_id: reference_variant("distribution-test", subject_id, THREE_WAY) for subject_id in subject_ids}
    assert answered == expected
    stored = dict(Assignment.objects.values_list("subject_id", "variant__key"))
    assert stored == expected
    # And the observed split matches the configured one
    counts = Counter(answered.values())
    chi_square = sum(
        (counts[variant] - NEW_SUBJECTS * split) ** 2 / (NEW_SUBJECTS * split) for variant, split in THREE_WAY
    )
    assert chi_square < CHI_SQUARE_LIMIT, (counts, chi_square)
    for variant, split in THREE_WAY:
        sigma = math.sqrt(NEW_SUBJECTS * split * (1 - split))
        assert abs(counts[variant] - NEW_SUBJECTS * split) < 5 * sigma, counts
