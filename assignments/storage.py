"""Set-based SQL for the assignment hot path: one statement per step, whatever the batch size.

The ORM would send `subject_id IN (...)` with one parameter per subject. Here a
batch travels as one JSON text parameter, expanded by the database
(json_array_elements on PostgreSQL, json_each on SQLite) and joined to the unique
index on (experiment_id, subject_id), which a join keeps in use even when the
table's statistics are stale. One JSON string rather than arrays: converting a
1000-item array parameter cost more than the statements themselves
(docs/benchmarks.md). Where it is safe, the statements are prepared
(config.database.statement_cursor).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import orjson
from django.db import connection

from config.database import statement_cursor

TABLE = "assignments_assignment"

# The first branch returns the experiment's resource_version (its row has a NULL
# subject ID), so the caller learns whether its cached state is stale at no extra
# round trip; no row at all means the experiment is gone.
#
# Each subject is looked up on its own, through the unique index on (experiment_id,
# subject_id): OFFSET 0 keeps the planner from turning the lookup into a join, for
# which it could pick a scan of all the experiment's rows. This statement is
# prepared (config.database.statement_cursor), and a prepared statement's generic
# plan is chosen without knowing the experiment: with many small experiments in the
# statistics, a join plan would read the whole of a big one on every request.
POSTGRES_FETCH = """
SELECT NULL, NULL, e.resource_version FROM assignments_experiment e WHERE e.id = %s
UNION ALL
SELECT s.subject_id, a.variant_id, NULL
FROM json_array_elements_text(%s::json) AS s(subject_id)
CROSS JOIN LATERAL (
    SELECT variant_id FROM assignments_assignment
    WHERE experiment_id = %s AND subject_id = s.subject_id
    OFFSET 0
) AS a
"""

# Rows arrive sorted by subject ID, so two batches that overlap take their
# unique-index locks in the same order and cannot deadlock.
POSTGRES_INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT %s, s.item ->> 0, (s.item ->> 1)::bigint, %s, %s
FROM json_array_elements(%s::json) WITH ORDINALITY AS s(item, ord)
ORDER BY s.ord
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id, variant_id
"""

SQLITE_FETCH = """
SELECT NULL, NULL, e.resource_version FROM assignments_experiment e WHERE e.id = %s
UNION ALL
SELECT a.subject_id, a.variant_id, NULL
FROM json_each(%s) AS s
JOIN assignments_assignment a ON a.experiment_id = %s AND a.subject_id = s.value
"""

# SQLite needs the WHERE to tell the upsert clause from a join constraint.
SQLITE_INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT %s, json_extract(value, '$[0]'), json_extract(value, '$[1]'), %s, %s
FROM json_each(%s) WHERE true ORDER BY key
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id, variant_id
"""


def _json(value: Sequence) -> str:
    return orjson.dumps(value).decode()


def assignments_fetch(*, experiment_pk: int, subject_ids: Sequence[str]) -> tuple[int | None, dict[str, int]]:
    """The experiment's current resource_version (None if it is gone), and the stored
    variant primary keys of those subjects that have one."""
    sql = POSTGRES_FETCH if connection.vendor == "postgresql" else SQLITE_FETCH
    with statement_cursor(table=TABLE) as cursor:
        cursor.execute(sql, [experiment_pk, _json(subject_ids), experiment_pk])
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
    sql = POSTGRES_INSERT if connection.vendor == "postgresql" else SQLITE_INSERT
    created = connection.ops.adapt_datetimefield_value(created_at)
    with statement_cursor(table=TABLE) as cursor:
        cursor.execute(sql, [experiment_pk, cohort, created, _json(rows)])
        return dict(cursor.fetchall())


# Backfills and QA overrides: each row carries its own timestamp, and the source and
# reason are the statement's. Rows keep the caller's order (sorted by subject ID where
# a race with the API is possible, for the reason given at POSTGRES_INSERT).
POSTGRES_INSERT_ROWS = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source, reason)
SELECT %s, s.item ->> 0, (s.item ->> 1)::bigint, %s, (s.item ->> 2)::timestamptz, %s, %s
FROM json_array_elements(%s::json) WITH ORDINALITY AS s(item, ord)
ORDER BY s.ord
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id
"""

SQLITE_INSERT_ROWS = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source, reason)
SELECT %s, json_extract(value, '$[0]'), json_extract(value, '$[1]'), %s, json_extract(value, '$[2]'), %s, %s
FROM json_each(%s) WHERE true ORDER BY key
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id
"""


def assignments_insert_rows(
    *,
    experiment_pk: int,
    cohort: int,
    rows: Sequence[tuple[str, int, datetime]],
    source: str,
    reason: str = "",
) -> set[str]:
    """Insert (subject ID, variant pk, created at) rows with one source, skipping subjects already
    assigned (assignment_experiment_subject_unique); returns the subject IDs this call inserted."""
    postgres = connection.vendor == "postgresql"
    items = [
        [subject_id, variant_pk, moment.isoformat() if postgres else connection.ops.adapt_datetimefield_value(moment)]
        for subject_id, variant_pk, moment in rows
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            POSTGRES_INSERT_ROWS if postgres else SQLITE_INSERT_ROWS,
            [experiment_pk, cohort, source, reason, _json(items)],
        )
        return {subject_id for (subject_id,) in cursor.fetchall()}


# A batch of an experiment's assignments, found through the unique index on (experiment_id, subject_id).
DELETE_BATCH = """
DELETE FROM assignments_assignment WHERE id IN (
    SELECT id FROM assignments_assignment WHERE experiment_id = %s LIMIT %s
)
"""


def assignments_delete_batch(*, experiment_pk: int, limit: int) -> int:
    """Delete up to `limit` of the experiment's assignments; returns how many."""
    with connection.cursor() as cursor:
        cursor.execute(DELETE_BATCH, [experiment_pk, limit])
        return cursor.rowcount
