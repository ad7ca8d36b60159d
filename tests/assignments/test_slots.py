"""assignments/slots.py: layer slots, the draw and the ranges as pure functions, and the slot draw exact,
recomputable in SQL and independent of every other draw.

The SQL is read from docs/reference/sql-recipes.md ("Recomputing a layer's slots in SQL"), so the page and
what these tests run cannot drift apart: the page's query is checked against the service's own answers.
"""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from assignments.assigning import assign_subjects
from assignments.console.statistics import chi_square_sf
from assignments.gates import LAYER_EXCLUDED
from assignments.hashing import Allocation
from assignments.models import Assignment
from assignments.slots import SLOTS, grows, overlap, owns, ranges_from, ranges_problems, slot
from tests.helpers.draws import ALPHA, BLOCK, SPLITS, doc_section, independence_chi_square, odd_subject_ids
from tests.helpers.resources import apply_resources, experiment, in_layer, layer, subject_type


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


# --- the slot draw: exact, recomputable in SQL, independent of every other draw ---


SECTION = "## Recomputing a layer's slots in SQL"
LAYER_SALT = "Flow-Sälz"
RANGES = [[0, 1234], [5000, 6789], [9999, 10000]]


def doc_query() -> str:
    (query,) = [block for language, block in BLOCK.findall(doc_section(SECTION)) if language == "sql"]
    return query


def sql_slots(subject_ids: list[str], *, salt: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS pg_temp.layer, pg_temp.subject")
        cursor.execute("CREATE TEMP TABLE layer (salt text)")
        cursor.execute("CREATE TEMP TABLE subject (subject_id text)")
        cursor.execute("INSERT INTO layer VALUES (%s)", [salt])
        cursor.execute("INSERT INTO subject SELECT unnest(%s::text[])", [subject_ids])
        cursor.execute(doc_query())
        return dict(cursor.fetchall())


@pytest.mark.postgres
def test_slot_sql__over_10000_subject_ids_through_the_service__exactly_the_subjects_in_its_ranges_enter(db):
    # Given an experiment owning three ranges of a layer with its own salt
    document = experiment("sliced", layer=in_layer("flow", *RANGES))
    apply_resources(subject_type("user"), layer("flow", salt=LAYER_SALT), document)
    subject_ids = [f"subject-{number}" for number in range(10_000)] + odd_subject_ids()

    # When the service answers every subject, a thousand per request
    excluded: dict[str, str] = {}
    for start in range(0, len(subject_ids), 1000):
        excluded.update(assign_subjects(experiment_id="sliced", subject_ids=subject_ids[start : start + 1000]).excluded)

    # Then the page's SQL gives every subject the slot the service drew, and the ones inside the ranges entered
    computed = sql_slots(subject_ids, salt=LAYER_SALT)
    assert computed == {subject_id: slot(LAYER_SALT, subject_id) for subject_id in subject_ids}
    inside = {s for s, number in computed.items() if any(start <= number < end for start, end in RANGES)}
    assert set(excluded) == set(subject_ids) - inside
    assert set(excluded.values()) == {LAYER_EXCLUDED}
    assert set(Assignment.objects.filter(experiment__key="sliced").values_list("subject_id", flat=True)) == inside
    # And the data set is not degenerate: about the ranges' share entered
    assert 0.28 < len(inside) / len(subject_ids) < 0.33


SUBJECTS = 100_000


@pytest.fixture(scope="module")
def subject_ids() -> list[str]:
    return [f"subject-{number}" for number in range(SUBJECTS)]


def test_slots__two_layers__deciles_independent(subject_ids):
    # Given each subject's slot decile in two layers with their own salts
    table = [[0] * 10 for _ in range(10)]
    for subject_id in subject_ids:
        table[slot("checkout-flow", subject_id) // 1000][slot("search-ranking", subject_id) // 1000] += 1

    # Then neither layer's decile leans towards one of the other's (one salt for both would put every subject on
    # the diagonal)
    statistic, degrees_of_freedom = independence_chi_square(table)
    assert degrees_of_freedom == 81
    assert chi_square_sf(statistic, degrees_of_freedom) > ALPHA, table


def test_slots__a_layer_and_an_experiment__slot_decile_independent_of_the_variant(subject_ids):
    # Given each subject's slot decile and its variant in an experiment with its own salt
    allocation = Allocation(SPLITS)
    columns = {variant: index for index, (variant, _) in enumerate(SPLITS)}
    table = [[0] * len(SPLITS) for _ in range(10)]
    for subject_id in subject_ids:
        table[slot("checkout-flow", subject_id) // 1000][columns[allocation.variant_for("pricing", subject_id)]] += 1

    # Then the experiment's variants are spread over the layer's deciles as configured, whatever the slot
    statistic, degrees_of_freedom = independence_chi_square(table)
    assert degrees_of_freedom == 18
    assert chi_square_sf(statistic, degrees_of_freedom) > ALPHA, table
