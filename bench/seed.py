"""The assignments stored before a hot-path run measures (hot-path, admin, metrics): deployment size, loaded fast.

Subjects seeded_subject_id(0..N-1) of checkout-button, each with the variant
assignments/hashing.py gives, as the service would have stored them (source
hashed, the current cohort). One COPY rather than the hot path's statements:
a million rows load in well under a minute. COPY fires the count triggers like
any INSERT, so assignments_assignmentcount stays exact; seed_check says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.baseline import experiment_read, experiments_read
from bench.scenarios import seeded_subject_id

COPY = "COPY assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source) FROM STDIN"

# seeded_subject_id's IDs, and no others: new subjects carry a run prefix of hex digits.
SEEDED = "SELECT count(*) FROM assignments_assignment WHERE experiment_id = %s AND subject_id LIKE 'seed-%%'"


# What a run reports when counts_exact says no.
COUNTS_NOT_EXACT = "assignments_assignmentcount does not add up to the assignments"


def counts_exact(connection: psycopg.Connection) -> bool:
    """Whether the trigger-kept counts add up to the assignments, per experiment."""
    counted = connection.execute(
        "SELECT experiment_id, sum(assignments) FROM assignments_assignmentcount GROUP BY 1 ORDER BY 1"
    ).fetchall()
    stored = connection.execute(
        "SELECT experiment_id, count(*) FROM assignments_assignment GROUP BY 1 ORDER BY 1"
    ).fetchall()
    return counted == stored


def assignments_seed(*, database_url: str, count: int) -> dict[str, Any]:
    """Store the seeded subjects not stored yet (a reused database may hold some or all), then VACUUM ANALYZE.

    Seeded IDs are stored in order from 0, so those present are the first ones.
    """
    with psycopg.connect(database_url, autocommit=True) as connection:
        experiment = experiment_read(connection)
        (present,) = connection.execute(SEEDED, [experiment.pk]).fetchone()
        started = time.monotonic()
        if present < count:
            created_at = datetime.now(UTC)
            with connection.cursor().copy(COPY) as copy:
                for number in range(present, count):
                    subject_id = seeded_subject_id(number)
                    variant = experiment.allocation.variant_for(experiment.salt, subject_id)
                    copy.write_row((experiment.pk, subject_id, variant, experiment.cohort, created_at, "hashed"))
            copied = time.monotonic() - started
            connection.execute("VACUUM ANALYZE assignments_assignment")
            connection.execute("VACUUM ANALYZE assignments_assignmentcount")
        else:
            copied = 0.0
        return {
            "seeded": count,
            "copied": max(0, count - present),
            "copy_seconds": copied,
            "seconds": time.monotonic() - started,
            **table_state(connection),
        }


def stored_seed(*, database_url: str, count: int, experiment_ids: Sequence[str]) -> dict[str, Any]:
    """Store seeded_subject_id(0..count-1) in each of these experiments too, those not stored yet (the first
    ones, in order, as assignments_seed stores them), each with the formula's variant (source hashed, the
    current cohort): the stored users of the scenarios that ask for one subject in many experiments
    (Scenario.existing_among). Then VACUUM ANALYZE."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        started = time.monotonic()
        catalog = experiments_read(connection)
        experiments = [catalog[experiment_id.lower()] for experiment_id in experiment_ids]
        present = {e.pk: connection.execute(SEEDED, [e.pk]).fetchone()[0] for e in experiments}
        copied = sum(max(0, count - present[e.pk]) for e in experiments)
        created_at = datetime.now(UTC)
        if copied:
            with connection.cursor().copy(COPY) as copy:
                for experiment in experiments:
                    for number in range(present[experiment.pk], count):
                        subject_id = seeded_subject_id(number)
                        variant = experiment.allocation.variant_for(experiment.salt, subject_id)
                        copy.write_row((experiment.pk, subject_id, variant, experiment.cohort, created_at, "hashed"))
            connection.execute("VACUUM ANALYZE assignments_assignment")
            connection.execute("VACUUM ANALYZE assignments_assignmentcount")
        return {
            "count": count,
            "experiments": list(experiment_ids),
            "copied": copied,
            "seconds": time.monotonic() - started,
            **table_state(connection),
        }


def table_state(connection: psycopg.Connection) -> dict[str, Any]:
    """How many assignments are stored, and whether their counts are exact."""
    (assignments,) = connection.execute("SELECT count(*) FROM assignments_assignment").fetchone()
    return {"assignments": assignments, "counts_exact": counts_exact(connection)}
