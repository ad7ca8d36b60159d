"""The raw-SQL floor: the same work as the service's hot path with nothing around it.

One plain psycopg 3 connection per worker (autocommit, psycopg's defaults, so
statements are prepared after a few runs), the assignment computed in Python by
assignments/hashing.py, and the service's set-based statements with arrays bound
server-side (psycopg's own binding, no Django): a fetch
joining unnest(array) to the (experiment_id, subject_id) unique index, an
INSERT ... SELECT FROM unnest ... ON CONFLICT DO NOTHING RETURNING for the
missing subjects, and a re-read of conflict losers only. No HTTP, no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from assignments.hashing import Allocation
from bench.scenarios import EXPERIMENT_ID, SubjectIds, seeded_subject_id

FETCH = """
SELECT a.subject_id, a.variant_id
FROM unnest(%s::text[]) AS s(subject_id)
JOIN assignments_assignment a ON a.experiment_id = %s AND a.subject_id = s.subject_id
"""

INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT %s, s.subject_id, s.variant_id, %s, %s
FROM unnest(%s::text[], %s::bigint[]) WITH ORDINALITY AS s(subject_id, variant_id, ord)
ORDER BY s.ord
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id, variant_id
"""


@dataclass(frozen=True)
class Experiment:
    pk: int
    salt: str
    cohort: int
    allocation: Allocation[int]
    variant_keys: dict[int, str]


def experiment_read(connection: psycopg.Connection, *, experiment_id: str = EXPERIMENT_ID) -> Experiment:
    """What the hot path needs, read once (the service caches the same in-process)."""
    row = connection.execute(
        "SELECT id, salt FROM assignments_experiment WHERE lower(key) = lower(%s)", [experiment_id]
    ).fetchone()
    if row is None:
        raise LookupError(f"no experiment {experiment_id!r}: was the demo configuration applied?")
    pk, salt = row
    variants = connection.execute(
        "SELECT id, key, split FROM assignments_variant WHERE experiment_id = %s ORDER BY position", [pk]
    ).fetchall()
    (cohort,) = connection.execute(
        "SELECT coalesce(max(number), 1) FROM assignments_cohort WHERE experiment_id = %s", [pk]
    ).fetchone()
    return Experiment(
        pk=pk,
        salt=salt,
        cohort=cohort,
        allocation=Allocation([(variant_pk, split) for variant_pk, _, split in variants]),
        variant_keys={variant_pk: key for variant_pk, key, _ in variants},
    )


def assignments_store(connection: psycopg.Connection, experiment: Experiment, subject_ids: list[str]) -> dict[str, str]:
    """Each distinct subject's variant ID, storing the missing assignments."""
    distinct = list(dict.fromkeys(subject_ids))
    stored = dict(connection.execute(FETCH, [distinct, experiment.pk]).fetchall())
    missing = sorted(subject_id for subject_id in distinct if subject_id not in stored)
    if missing:
        variants = [experiment.allocation.variant_for(experiment.salt, subject_id) for subject_id in missing]
        inserted = dict(
            connection.execute(
                INSERT, [experiment.pk, experiment.cohort, datetime.now(UTC), missing, variants]
            ).fetchall()
        )
        stored.update(inserted)
        lost = [subject_id for subject_id in missing if subject_id not in inserted]
        if lost:
            stored.update(connection.execute(FETCH, [lost, experiment.pk]).fetchall())
    return {subject_id: experiment.variant_keys[stored[subject_id]] for subject_id in distinct}


def assignments_seed(*, database_url: str, count: int, batch: int = 5000) -> None:
    """Assign `count` subjects with IDs seeded_subject_id(0..count-1), the pool that reads draw from."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        experiment = experiment_read(connection)
        for start in range(0, count, batch):
            ids = [seeded_subject_id(number) for number in range(start, min(start + batch, count))]
            assignments_store(connection, experiment, ids)
        connection.execute("VACUUM ANALYZE assignments_assignment")


class BaselineWorker:
    def __init__(self, *, database_url: str, subject_ids: SubjectIds) -> None:
        self.connection = psycopg.connect(database_url, autocommit=True)
        self.experiment = experiment_read(self.connection)
        self.subject_ids = subject_ids

    def prepare(self) -> list[str]:
        return self.subject_ids.next_batch()

    def send(self, request: list[str]) -> dict[str, str]:
        return assignments_store(self.connection, self.experiment, request)

    def check(self, request: list[str], answer: dict[str, str]) -> int:
        if answer.keys() != set(request):
            raise AssertionError(f"{len(answer)} assignments for {len(set(request))} subjects")
        return len(answer)

    def close(self) -> None:
        self.connection.close()
