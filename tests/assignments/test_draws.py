"""The variant and coverage draws: exact, recomputable in SQL, monotone in coverage and independent of each other.

The SQL is read from docs/explanation/population.md ("Recomputing the draws in SQL"), so the page and what
these tests run cannot drift apart: the page's query is checked against the service's own answers.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from statistics import NormalDist

import pytest
from django.db import connection
from hypothesis import example, given
from hypothesis import strategies as st

from assignments.assigning import assign_subjects
from assignments.gates import OUTSIDE_COVERAGE, Gates
from assignments.hashing import SCALE, Allocation, draws, threshold
from assignments.models import Assignment, Experiment
from assignments.statistics import chi_square_sf, sample_ratio_test
from tests.helpers import PROJECT_DIR
from tests.helpers.resources import apply_resources, experiment, split_variants, subject_type

DOC = PROJECT_DIR / "docs" / "explanation" / "population.md"
SECTION = "## Recomputing the draws in SQL"
# A fenced block: its language (empty for plain text) and its text.
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)

SALT = "Draws-Sälz"
SPLITS = [("control", 0.15), ("b", 0.6), ("c", 0.25)]
COVERAGE = 0.3
# Far beyond chance at every test below, yet no deterministic data set can stumble on it by bad luck.
ALPHA = 1e-4


def doc_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else len(text)]


def doc_sql() -> tuple[str, str]:
    """The page's two SQL blocks: the example's inputs, then the query."""
    blocks = [text for language, text in BLOCK.findall(doc_section()) if language == "sql"]
    assert len(blocks) == 2, f"{DOC.name}: '{SECTION}' needs two sql blocks, the inputs and the query"
    return blocks[0], blocks[1]


def doc_output() -> list[tuple[str, bool, str | None]]:
    """The rows the page says the query prints for its example's inputs (psql's aligned table)."""
    (table,) = [text for language, text in BLOCK.findall(doc_section()) if not language]
    rows = []
    for line in table.splitlines()[2:]:
        subject_id, covered, variant_id = (cell.strip() for cell in line.split("|"))
        rows.append((subject_id, covered == "t", variant_id or None))
    return rows


def odd_subject_ids() -> list[str]:
    """Subject IDs that a careless SQL translation gets wrong: non-ASCII (composed and decomposed, outside the
    Basic Multilingual Plane, right to left), 256 characters long, quotes, colons, backslashes, spaces."""
    shapes = [
        "ü-{}",
        "e\N{COMBINING ACUTE ACCENT}-{}",
        "\N{GRINNING FACE}{}",
        "\N{MAN}\N{ZERO WIDTH JOINER}\N{WOMAN}\N{ZERO WIDTH JOINER}\N{GIRL}{}",
        "日本語-{}",
        "\N{HEBREW LETTER ALEF}\N{HEBREW LETTER BET}-{}",
        " {} ",
        'it\'s "{}"',
        "a:b:{}",
        "back\\slash\\{}",
        "50%_{};--",
        "\N{GRINNING FACE}" * 200 + "{}",
    ]
    longest = [str(number).ljust(256, "z") for number in range(160)]
    return [shape.format(number) for shape in shapes for number in range(160)] + longest


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


def independence_chi_square(table: list[list[int]]) -> tuple[float, int]:
    """Pearson's chi-square statistic of a contingency table against independence of rows and columns,
    and its degrees of freedom."""
    total = sum(map(sum, table))
    row_sums = [sum(row) for row in table]
    column_sums = [sum(column) for column in zip(*table, strict=True)]
    statistic = math.fsum(
        (table[i][j] - row_sums[i] * column_sums[j] / total) ** 2 / (row_sums[i] * column_sums[j] / total)
        for i in range(len(table))
        for j in range(len(column_sums))
    )
    return statistic, (len(table) - 1) * (len(column_sums) - 1)


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
