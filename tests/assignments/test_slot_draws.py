"""The layer slot draw: exact and recomputable in SQL, and independent of every other draw.

The SQL is read from docs/explanation/population.md ("Recomputing a layer's slots in SQL"), so the page and
what these tests run cannot drift apart: the page's query is checked against the service's own answers.
"""

from __future__ import annotations

import pytest
from django.db import connection

from assignments.assigning import assign_subjects
from assignments.gates import LAYER_EXCLUDED
from assignments.hashing import Allocation
from assignments.models import Assignment
from assignments.slots import slot
from assignments.statistics import chi_square_sf
from tests.assignments.test_draws import ALPHA, BLOCK, DOC, SPLITS, independence_chi_square, odd_subject_ids
from tests.helpers.resources import apply_resources, experiment, in_layer, layer, subject_type

SECTION = "## Recomputing a layer's slots in SQL"
LAYER_SALT = "Flow-Sälz"
RANGES = [[0, 1234], [5000, 6789], [9999, 10000]]


def doc_query() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    (query,) = [
        block for language, block in BLOCK.findall(text[start : end if end != -1 else len(text)]) if language == "sql"
    ]
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
