"""The raw-SQL floor: the same work as the service's hot path with nothing around it.

One plain psycopg 3 connection per worker (autocommit, psycopg's defaults, so
statements are prepared after a few runs), the assignment computed in Python by
assignments/hashing.py, and the service's set-based statements with arrays bound
server-side (psycopg's own binding, no Django): a fetch
joining unnest(array) to the (experiment_id, subject_id) unique index, an
INSERT ... SELECT FROM unnest ... ON CONFLICT DO NOTHING RETURNING for the
missing subjects, and a re-read of conflict losers only. An identifier link is
the service's one INSERT ... ON CONFLICT DO NOTHING, with the subject types
read once. No HTTP, no Django, and no /healthz: there is no server to ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from assignments.hashing import Allocation
from bench.scenarios import ASSIGN, EXPERIMENT_ID, LINK, Scenario, SubjectIds

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

# What IdentifierLink.objects.bulk_create(..., ignore_conflicts=True) sends in idlinks/services.py.
LINK_INSERT = """
INSERT INTO idlinks_identifierlink (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, created_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
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


def subject_types_read(connection: psycopg.Connection) -> dict[str, int]:
    """The primary key of each active subject type, by its lower-cased ID."""
    return dict(connection.execute("SELECT lower(key), id FROM assignments_subjecttype WHERE status = 'active'"))


def link_pair(subject_types: dict[str, int], subject_id: str) -> list[tuple[int, str]]:
    """The bench's new pair, user:<ID> and cookie:<ID>, in the canonical order the service stores."""
    return sorted([(subject_types["user"], subject_id), (subject_types["cookie"], subject_id)])


def link_store(connection: psycopg.Connection, nodes: list[tuple[int, str]]) -> None:
    """Link two (subject type pk, subject ID) nodes given in canonical order; a linked pair stays as it is."""
    (type_a, subject_id_a), (type_b, subject_id_b) = nodes
    connection.execute(LINK_INSERT, [type_a, subject_id_a, type_b, subject_id_b, datetime.now(UTC)])


class BaselineWorker:
    def __init__(self, *, database_url: str, scenario: Scenario, subject_ids: SubjectIds) -> None:
        if scenario.kind not in (ASSIGN, LINK):
            raise ValueError(f"the baseline has no equivalent of scenario {scenario.key}")
        self.connection = psycopg.connect(database_url, autocommit=True)
        self.scenario = scenario
        self.subject_ids = subject_ids
        if scenario.kind == ASSIGN:
            self.experiment = experiment_read(self.connection)
        else:
            self.subject_types = subject_types_read(self.connection)

    def prepare(self) -> list[str]:
        return self.subject_ids.next_batch()

    def send(self, request: list[str]) -> dict[str, str] | None:
        if self.scenario.kind == LINK:
            return link_store(self.connection, link_pair(self.subject_types, request[0]))
        return assignments_store(self.connection, self.experiment, request)

    def check(self, request: list[str], answer: dict[str, str] | None) -> int:
        if self.scenario.kind == ASSIGN and answer.keys() != set(request):
            raise AssertionError(f"{len(answer)} assignments for {len(set(request))} subjects")
        return len(request)

    def close(self) -> None:
        self.connection.close()
