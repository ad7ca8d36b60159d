"""Set-based SQL for the assignment hot path: one statement per step, whatever the batch size
and however many experiments a request names (on Citus, a batch's read and its write are
one per shard: assignments/storage_citus.py).

The ORM would send `subject_id IN (...)` with one parameter per subject. Here a
batch travels as one JSON text parameter, expanded by the database
(json_array_elements on PostgreSQL, json_each on SQLite) and joined to the unique
index on (experiment_id, subject_id), which a join keeps in use even when the
table's statistics are stale. One JSON string rather than arrays: converting a
1000-item array parameter cost more than the statements themselves
(docs/explanation/performance.md). Where it is safe, the statements are prepared
(core.database.statement_cursor).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from typing import NamedTuple

from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from assignments.linking import Asked, LinkGraph, link_graph
from assignments.storage_citus import (
    Shards,
    Stored,
    assignments_distributed,
    citus_copier,
    citus_executor,
    citus_fetch_rows,
    citus_store,
)
from core.database import json_text, statement_cursor, timestamp_param
from core.steps import Statement, Steps, steps_run
from idlinks.storage import citus_links_within, link_walk_sql, walk_params
from idlinks.walk import MAX_DEPTH, Node

TABLE = "assignments_assignment"

# The first row of a fetch tells the caller whether its cached state is stale, at no
# extra round trip; its other columns are NULL. For one experiment it is that
# experiment's resource_version (no row at all: the experiment is gone); for the
# catalog of every experiment, or an experiment that depends on its holdouts or its
# layer, experiment_catalog_version (selectors.py).
POSTGRES_HEAD_EXPERIMENT = """
SELECT NULL::bigint, NULL::text, NULL::bigint, NULL::integer, NULL::text, e.resource_version::bigint
FROM assignments_experiment e WHERE e.id = %s
"""
POSTGRES_HEAD_CATALOG = """
SELECT NULL::bigint, NULL::text, NULL::bigint, NULL::integer, NULL::text,
       ((SELECT coalesce(sum(e.resource_version), 0) FROM assignments_experiment e)
        + (SELECT coalesce(sum(l.resource_version), 0) FROM assignments_layer l))::bigint
"""

# The subjects travel as one JSON object, {"<experiment pk>": ["<subject ID>", ...], ...}.
# Each subject is looked up on its own, through the unique index on (experiment_id,
# subject_id): OFFSET 0 keeps the planner from turning the lookup into a join, for
# which it could pick a scan of all the experiment's rows. This statement is
# prepared (core.database.statement_cursor), and a prepared statement's generic
# plan is chosen without knowing the experiment: with many small experiments in the
# statistics, a join plan would read the whole of a big one on every request.
POSTGRES_FETCH = """
UNION ALL
SELECT s.experiment_id, s.subject_id, a.variant_id, a.cohort, a.source, NULL
FROM (
    SELECT e.key::bigint AS experiment_id, x.subject_id
    FROM json_each(%s::json) AS e CROSS JOIN LATERAL json_array_elements_text(e.value) AS x(subject_id)
) AS s
CROSS JOIN LATERAL (
    SELECT variant_id, cohort, source FROM assignments_assignment
    WHERE experiment_id = s.experiment_id AND subject_id = s.subject_id
    OFFSET 0
) AS a
"""

# Rows arrive sorted by (experiment, subject ID), so two batches that overlap take
# their unique-index locks in the same order and cannot deadlock.
POSTGRES_INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, source, created_at)
SELECT (s.item ->> 0)::bigint, s.item ->> 1, (s.item ->> 2)::bigint, (s.item ->> 3)::integer, s.item ->> 4, %s
FROM json_array_elements(%s::json) WITH ORDINALITY AS s(item, ord)
ORDER BY s.ord
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING experiment_id, subject_id, variant_id
"""

SQLITE_HEAD_EXPERIMENT = (
    "SELECT NULL, NULL, NULL, NULL, NULL, e.resource_version FROM assignments_experiment e WHERE e.id = %s"
)
SQLITE_HEAD_CATALOG = """
SELECT NULL, NULL, NULL, NULL, NULL,
       (SELECT coalesce(sum(e.resource_version), 0) FROM assignments_experiment e)
       + (SELECT coalesce(sum(l.resource_version), 0) FROM assignments_layer l)
"""

SQLITE_FETCH = """
UNION ALL
SELECT a.experiment_id, a.subject_id, a.variant_id, a.cohort, a.source, NULL
FROM json_each(%s) AS e, json_each(e.value) AS x
JOIN assignments_assignment a ON a.experiment_id = CAST(e.key AS INTEGER) AND a.subject_id = x.value
"""

# SQLite needs the WHERE to tell the upsert clause from a join constraint.
SQLITE_INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, source, created_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), %s
FROM json_each(%s) WHERE true ORDER BY key
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING experiment_id, subject_id, variant_id
"""

FETCH = {
    ("postgresql", True): POSTGRES_HEAD_EXPERIMENT + POSTGRES_FETCH,
    ("postgresql", False): POSTGRES_HEAD_CATALOG + POSTGRES_FETCH,
    ("sqlite", True): SQLITE_HEAD_EXPERIMENT + SQLITE_FETCH,
    ("sqlite", False): SQLITE_HEAD_CATALOG + SQLITE_FETCH,
}


def storage_vendor() -> str:
    """Which form of the hot path's statements this connection takes: "postgresql", "citus" or "sqlite"."""
    if connection.vendor != "postgresql":
        return "sqlite"
    return "citus" if assignments_distributed() else "postgresql"


# (experiment pk, subject ID) -> the stored row's (cohort, source)
Provenance = dict[tuple[int, str], tuple[int, str]]


class Fetched(NamedTuple):
    # experiment_pk's resource_version or experiment_catalog_version (assignments_fetch)
    version: int | None
    stored: Stored
    # On Citus, for a read split by shard, the shard of each subject ID asked; else None.
    shards: Shards | None
    # With `provenance` asked for, each stored pair's cohort and source; else None.
    provenance: Provenance | None = None


def assignments_fetch(
    *, subjects: dict[int, Sequence[str]], experiment_pk: int | None = None, provenance: bool = False
) -> Fetched:
    """assignments_fetch_steps sent on Django's connection."""
    return steps_run(
        assignments_fetch_steps(
            vendor=storage_vendor(), subjects=subjects, experiment_pk=experiment_pk, provenance=provenance
        )
    )


def assignments_fetch_steps(
    *, vendor: str, subjects: dict[int, Sequence[str]], experiment_pk: int | None = None, provenance: bool = False
) -> Steps[Fetched]:
    """The stored variant primary keys of those (experiment pk, subject ID) pairs that have one,
    and a version to check the caller's cached state with: `experiment_pk`'s resource_version
    (None if it is gone) or, without it, experiment_catalog_version. With `provenance`, also each
    stored row's cohort and source, which the statement reads in any case (an OpenFeature evaluation
    answers them); only kept when asked, so that a batch of 1000 builds no second map it does not use.
    `vendor`: storage_vendor()'s answer for the connection the steps are sent on."""
    head = [] if experiment_pk is None else [experiment_pk]
    shards = None
    if vendor == "citus":
        subject_ids = sorted({sid for ids in subjects.values() for sid in ids})
        rows, shards = yield partial(
            _citus_fetch,
            head_sql=POSTGRES_HEAD_EXPERIMENT if head else POSTGRES_HEAD_CATALOG,
            head=head,
            experiments=list(subjects),
            subject_ids=subject_ids,
        )
    else:
        rows = yield Statement(
            FETCH[(vendor, experiment_pk is not None)],
            [*head, json_text({str(pk): ids for pk, ids in subjects.items()})],
            prepare=TABLE,
        )
    version = None
    stored = {}
    kept: Provenance | None = {} if provenance else None
    asked = {pk: set(ids) for pk, ids in subjects.items()} if vendor == "citus" else None
    for pk, subject_id, variant_pk, cohort, source, resource_version in rows:
        if pk is None:
            version = resource_version
        elif asked is None or subject_id in asked[pk]:
            stored[(pk, subject_id)] = variant_pk
            if kept is not None:
                kept[(pk, subject_id)] = (cohort, source)
    return Fetched(version, stored, shards, kept)


def _citus_fetch(**read) -> tuple[list[tuple], Shards | None]:
    with statement_cursor(table=TABLE) as cursor:
        return citus_fetch_rows(citus_executor(cursor), **read)


def _returned(rows: list[tuple]) -> Stored:
    return {(pk, subject_id): variant_pk for pk, subject_id, variant_pk in rows}


def assignments_insert(
    *, rows: Sequence[tuple[int, str, int, int, str]], created_at: datetime, shards: Shards | None = None
) -> Stored:
    """assignments_insert_steps sent on Django's connection."""
    return steps_run(assignments_insert_steps(vendor=storage_vendor(), rows=rows, created_at=created_at, shards=shards))


def assignments_insert_steps(
    *, vendor: str, rows: Sequence[tuple[int, str, int, int, str]], created_at: datetime, shards: Shards | None = None
) -> Steps[Stored]:
    """Insert (experiment pk, subject ID, variant pk, cohort, source) rows, given sorted by
    experiment and subject ID, skipping pairs already assigned; returns the rows this call inserted.

    On Citus a batch from CITUS_SPLIT_FROM rows on is written shard by shard (`shards`, from the
    batch's read, saves asking which shard holds each), each committed on its own outside a
    transaction: a failure part way keeps the shards written before it (citus_store)."""
    created = timestamp_param(created_at, vendor=vendor)
    if vendor == "citus":
        return (yield partial(_citus_insert, rows, created, shards))
    sql = POSTGRES_INSERT if vendor == "postgresql" else SQLITE_INSERT
    return _returned((yield Statement(sql, [created, json_text(rows)], prepare=TABLE)))


def _citus_insert(rows: Sequence[tuple], created: datetime, shards: Shards | None) -> Stored:
    with connection.cursor() as cursor:
        return citus_store(
            citus_executor(cursor),
            citus_copier(cursor, created),
            rows,
            created,
            context=connection.connection,
            shards=shards,
        )


# The neighbourhood of a batch's new subjects, for following links (assignments/linking.py): the
# link walk of idlinks (idlinks/storage.py), in the same statement as the assignments that the
# identifiers it reached have in the experiments that follow links, each of those of that
# experiment's subject type (`following`). A batch costs one statement whatever its links.
ASSIGNMENTS_REACHED = """UNION ALL
SELECT r.type_id, r.subject_id, NULL, NULL, a.experiment_id, a.variant_id, a.created_at
FROM reached r
JOIN following f ON f.type_id = r.type_id
JOIN assignments_assignment a ON a.experiment_id = f.experiment_id AND a.subject_id = r.subject_id"""

POSTGRES_LINK_GRAPH = link_walk_sql(
    "postgresql",
    ctes=""", following AS (
    SELECT (f.item ->> 0)::bigint AS experiment_id, (f.item ->> 1)::bigint AS type_id
    FROM json_array_elements(%(following)s::json) AS f(item)
)""",
    padding=", NULL::bigint, NULL::bigint, NULL::timestamptz",
    union=ASSIGNMENTS_REACHED,
)

SQLITE_LINK_GRAPH = link_walk_sql(
    "sqlite",
    ctes=""", following(experiment_id, type_id) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(%(following)s)
)""",
    padding=", NULL, NULL, NULL",
    union=ASSIGNMENTS_REACHED,
)

# On Citus the walk is idlinks' level by level (citus_links_within), then one statement for the assignments.
CITUS_LINKED_ASSIGNMENTS = """
SELECT experiment_id, subject_id, variant_id, created_at FROM assignments_assignment
WHERE experiment_id = ANY(%s::bigint[]) AND subject_id = ANY(%s::text[])
"""


def _citus_link_graph(cursor, starts: set[Node], following: dict[int, int]) -> LinkGraph:
    """What POSTGRES_LINK_GRAPH reads, on Citus: the links level by level, then the assignments."""
    found = citus_links_within(cursor, starts=starts, depth=MAX_DEPTH)
    if found is None:
        return LinkGraph(links=[], assignments={}, complete=False)
    links, reached = found
    rows: list[tuple] = [(*node, *other, None, None, None) for node, other in links]
    cursor.execute(CITUS_LINKED_ASSIGNMENTS, [sorted(following), sorted({subject_id for _, subject_id in reached})])
    for experiment_pk, subject_id, variant_pk, created_at in cursor.fetchall():
        if (following[experiment_pk], subject_id) in reached:
            rows.append((following[experiment_pk], subject_id, None, None, experiment_pk, variant_pk, created_at))
    return link_graph(rows)


def link_graph_params(asked: Sequence[Asked]) -> dict:
    """The parameters of POSTGRES_LINK_GRAPH and SQLITE_LINK_GRAPH for these subjects: idlinks' walk from their
    identifiers, and the (experiment pk, subject type pk) pairs whose assignments it reads."""
    return {
        **walk_params(starts={(type_pk, subject_id) for _, type_pk, subject_id in asked}, depth=MAX_DEPTH),
        "following": json_text(sorted({(pk, type_pk) for pk, type_pk, _ in asked})),
    }


def assignments_link_graph(*, asked: Sequence[Asked]) -> LinkGraph:
    """assignments_link_graph_steps sent on Django's connection."""
    return steps_run(assignments_link_graph_steps(vendor=storage_vendor(), asked=asked))


def assignments_link_graph_steps(*, vendor: str, asked: Sequence[Asked]) -> Steps[LinkGraph]:
    """The links around these new subjects of experiments that follow links, and the assignments
    the identifiers there have in those experiments (assignments/linking.py); one statement for
    all, or on Citus one per level of links and one for the assignments."""
    if vendor == "citus":
        return (yield partial(_citus_link_graph_read, asked))
    if vendor == "postgresql":
        return link_graph((yield Statement(POSTGRES_LINK_GRAPH, link_graph_params(asked))))
    rows = yield Statement(SQLITE_LINK_GRAPH, link_graph_params(asked))
    # SQLite hands times back as text.
    return link_graph((*row[:6], row[6] and parse_datetime(row[6])) for row in rows)


def _citus_link_graph_read(asked: Sequence[Asked]) -> LinkGraph:
    starts = {(type_pk, subject_id) for _, type_pk, subject_id in asked}
    with connection.cursor() as cursor:
        return _citus_link_graph(cursor, starts, {pk: type_pk for pk, type_pk, _ in asked})


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
            [experiment_pk, cohort, source, reason, json_text(items)],
        )
        return {subject_id for (subject_id,) in cursor.fetchall()}


# A batch of an experiment's assignments, found through the unique index on (experiment_id, subject_id), and
# the rows as they were, for the change feed's record of their deletion (assignments/data/change_log.py).
DELETE_BATCH = """
DELETE FROM assignments_assignment WHERE id IN (
    SELECT id FROM assignments_assignment WHERE experiment_id = %s LIMIT %s
)
RETURNING id, subject_id, variant_id, cohort, created_at, source, change_xid, recorded_at
"""


class StoredRow(NamedTuple):
    """An assignment's row as the change feed records it."""

    id: int
    subject_id: str
    variant_pk: int
    cohort: int
    created_at: datetime
    source: str
    change_xid: int | None
    recorded_at: datetime | None


def assignments_delete_batch(*, experiment_pk: int, limit: int) -> list[StoredRow]:
    """Delete up to `limit` of the experiment's assignments; returns them as they were."""
    with connection.cursor() as cursor:
        cursor.execute(DELETE_BATCH, [experiment_pk, limit])
        return [_stored_row(row) for row in cursor.fetchall()]


def _stored_row(row: Sequence) -> StoredRow:
    pk, subject_id, variant_pk, cohort, created_at, source, change_xid, recorded_at = row
    return StoredRow(
        pk, subject_id, variant_pk, cohort, stored_moment(created_at), source, change_xid, stored_moment(recorded_at)
    )


def stored_moment(value: datetime | str | None) -> datetime | None:
    """A time the database handed back, aware, in UTC (SQLite hands times back as text)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is None or timezone.is_aware(value):
        return value
    return timezone.make_aware(value, UTC)
