"""Set-based SQL for the assignment hot path: one statement per step, whatever the batch size.

The ORM would send `subject_id IN (...)` with one parameter per subject; on
PostgreSQL a join to `unnest(array)` keeps the unique index in use even when the
table's statistics are stale, and SQLite gets the same shape through json_each.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from django.db import connection

# The first branch returns the experiment's resource_version (its row has a NULL
# subject ID), so the caller learns whether its cached state is stale at no extra
# round trip; no row at all means the experiment is gone.
POSTGRES_FETCH = """
SELECT NULL, NULL, e.resource_version FROM assignments_experiment e WHERE e.id = %s
UNION ALL
SELECT a.subject_id, a.variant_id, NULL
FROM unnest(%s::text[]) AS s(subject_id)
JOIN assignments_assignment a ON a.experiment_id = %s AND a.subject_id = s.subject_id
"""

# Rows arrive sorted by subject ID, so two batches that overlap take their
# unique-index locks in the same order and cannot deadlock.
POSTGRES_INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT %s, s.subject_id, s.variant_id, %s, %s
FROM unnest(%s::text[], %s::bigint[]) WITH ORDINALITY AS s(subject_id, variant_id, ord)
ORDER BY s.ord
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id, variant_id
"""

SQLITE_FETCH = """
SELECT NULL, NULL, e.resource_version FROM assignments_experiment e WHERE e.id = %s
UNION ALL
SELECT a.subject_id, a.variant_id, NULL
FROM assignments_assignment a
WHERE a.experiment_id = %s AND a.subject_id IN (SELECT value FROM json_each(%s))
"""

# SQLite needs the WHERE to tell the upsert clause from a join constraint.
SQLITE_INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT %s, json_extract(value, '$[0]'), json_extract(value, '$[1]'), %s, %s
FROM json_each(%s) WHERE true ORDER BY key
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id, variant_id
"""


def assignments_fetch(*, experiment_pk: int, subject_ids: Sequence[str]) -> tuple[int | None, dict[str, int]]:
    """The experiment's current resource_version (None if it is gone), and the stored
    variant primary keys of those subjects that have one."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRES_FETCH, [experiment_pk, list(subject_ids), experiment_pk])
        else:
            cursor.execute(SQLITE_FETCH, [experiment_pk, experiment_pk, json.dumps(list(subject_ids))])
        version = None
        stored = {}
        for subject_id, variant_pk, resource_version in cursor.fetchall():
            if subject_id is None:
                version = resource_version
            else:
                stored[subject_id] = variant_pk
        return version, stored


def assignments_insert(
    *, experiment_pk: int, cohort: int, rows: Sequence[tuple[str, int]], created_at: datetime
) -> dict[str, int]:
    """Insert (subject ID, variant pk) rows sorted by subject ID, skipping subjects already
    assigned; returns the rows this call inserted."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            subject_ids = [subject_id for subject_id, _ in rows]
            variant_pks = [variant_pk for _, variant_pk in rows]
            cursor.execute(POSTGRES_INSERT, [experiment_pk, cohort, created_at, subject_ids, variant_pks])
        else:
            cursor.execute(
                SQLITE_INSERT,
                [
                    experiment_pk,
                    cohort,
                    connection.ops.adapt_datetimefield_value(created_at),
                    json.dumps([list(row) for row in rows]),
                ],
            )
        return dict(cursor.fetchall())
