"""Set-based SQL for the assignment hot path: one statement per step, whatever the batch size
and however many experiments a request names (on Citus, a batch's read and its write are
one per shard: citus_fetch_rows, citus_store).

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

import contextlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import NamedTuple

import orjson
from django.db import DatabaseError, connection, transaction
from django.utils.dateparse import parse_datetime
from psycopg import BaseConnection
from psycopg.adapt import Transformer

from assignments.distribution import assignments_distributed
from assignments.linking import (
    FANOUT,
    MAX_DEPTH,
    MAX_LINK_ROWS,
    Asked,
    LinkGraph,
    Node,
    graph_params,
    link_graph,
)
from core.database import statement_cursor

TABLE = "assignments_assignment"

# The first row of a fetch tells the caller whether its cached state is stale, at no
# extra round trip; its other columns are NULL. For one experiment it is that
# experiment's resource_version (no row at all: the experiment is gone); for the
# catalog of every experiment, or an experiment that depends on its holdouts or its
# layer, experiment_catalog_version (selectors.py).
POSTGRES_HEAD_EXPERIMENT = """
SELECT NULL::bigint, NULL::text, NULL::bigint, e.resource_version::bigint FROM assignments_experiment e WHERE e.id = %s
"""
POSTGRES_HEAD_CATALOG = """
SELECT NULL::bigint, NULL::text, NULL::bigint,
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
SELECT s.experiment_id, s.subject_id, a.variant_id, NULL
FROM (
    SELECT e.key::bigint AS experiment_id, x.subject_id
    FROM json_each(%s::json) AS e CROSS JOIN LATERAL json_array_elements_text(e.value) AS x(subject_id)
) AS s
CROSS JOIN LATERAL (
    SELECT variant_id FROM assignments_assignment
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

SQLITE_HEAD_EXPERIMENT = "SELECT NULL, NULL, NULL, e.resource_version FROM assignments_experiment e WHERE e.id = %s"
SQLITE_HEAD_CATALOG = """
SELECT NULL, NULL, NULL,
       (SELECT coalesce(sum(e.resource_version), 0) FROM assignments_experiment e)
       + (SELECT coalesce(sum(l.resource_version), 0) FROM assignments_layer l)
"""

SQLITE_FETCH = """
UNION ALL
SELECT a.experiment_id, a.subject_id, a.variant_id, NULL
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

# On Citus the lateral lookup is refused (a lateral subquery over a table function with
# OFFSET). Filters on both columns let it route one subject's lookup to its one shard,
# head row included (experiments are a reference table, on every node), each shard
# probing the unique index; a batch's is split by shard (citus_fetch_rows). The filters
# select the cross product of the experiments and subject IDs: the caller keeps the pairs
# it asked for.
CITUS_FETCH_ROWS = """
SELECT experiment_id, subject_id, variant_id, NULL FROM assignments_assignment
WHERE experiment_id = ANY(%s::bigint[]) AND subject_id = ANY(%s::text[])
"""
CITUS_FETCH = "UNION ALL" + CITUS_FETCH_ROWS
# One subject ID, as a one-subject request reads it, is compared with `=`: with `= ANY` of a one-item array on
# the distribution column the same read cost the workers twice the CPU, 0.39 to 0.45 ms against 0.17 to 0.21
# (bench/results/history.md, "One subject on Citus: its read and its count").
CITUS_FETCH_SUBJECT = """UNION ALL
SELECT experiment_id, subject_id, variant_id, NULL FROM assignments_assignment
WHERE experiment_id = ANY(%s::bigint[]) AND subject_id = %s
"""

FETCH = {
    ("postgresql", True): POSTGRES_HEAD_EXPERIMENT + POSTGRES_FETCH,
    ("postgresql", False): POSTGRES_HEAD_CATALOG + POSTGRES_FETCH,
    ("citus", True): POSTGRES_HEAD_EXPERIMENT + CITUS_FETCH,
    ("citus", False): POSTGRES_HEAD_CATALOG + CITUS_FETCH,
    ("citus-subject", True): POSTGRES_HEAD_EXPERIMENT + CITUS_FETCH_SUBJECT,
    ("citus-subject", False): POSTGRES_HEAD_CATALOG + CITUS_FETCH_SUBJECT,
    ("sqlite", True): SQLITE_HEAD_EXPERIMENT + SQLITE_FETCH,
    ("sqlite", False): SQLITE_HEAD_CATALOG + SQLITE_FETCH,
}

# (experiment pk, subject ID) -> variant pk
Stored = dict[tuple[int, str], int]

# Citus sends a statement whose filter spans shards to each of them whole, so every shard
# would parse a batch's subject IDs and probe its index for all of them. A batch's read is
# instead one statement per shard with that shard's IDs (the head row in the first), after
# one that asks the coordinator which shard holds each ID. Reading 1000 stored subjects
# over 4 shards cost 15 ms of database CPU on all nodes that way against 53 in one
# statement; 300, 6 against 34; 100, about the same either way (bench/results/history.md,
# "Citus shard count"). Below CITUS_SPLIT_FROM IDs one statement is sent.
#
# The IDs go to the coordinator as one JSON text and come back as each shard's array,
# also in PostgreSQL's text form, which goes out again as one string: psycopg writes a
# list parameter item by item in Python, which cost more client CPU than the statements'
# own work (bench/results/history.md, "The Citus batch's client work, and its insert
# shard by shard"). The arrays tell the batch's insert which shard holds each subject
# (citus_shard_rows).
CITUS_BY_SHARD = """
SELECT get_shard_id_for_distribution_column('assignments_assignment', x) AS shard,
       array_agg(x ORDER BY x), array_agg(x ORDER BY x)::text
FROM json_array_elements_text(%s::json) AS x GROUP BY shard ORDER BY shard
"""
CITUS_SPLIT_FROM = 100

# Subject ID -> the Citus shard holding it, as a split read found it.
Shards = dict[str, int]


def citus_fetch_rows(
    execute: Callable[[str, list], list[tuple]], *, head: list, experiments: list[int], subject_ids: list[str]
) -> tuple[list[tuple], Shards | None]:
    """FETCH[("citus", ...)]'s rows for these sorted subject IDs (the head row's parameters in `head`), through
    `execute(sql, params) -> rows`: for one ID, FETCH[("citus-subject", ...)]; read shard by shard from
    CITUS_SPLIT_FROM IDs on; and then the shard of each ID (None below CITUS_SPLIT_FROM)."""
    if len(subject_ids) == 1:
        return execute(FETCH[("citus-subject", bool(head))], [*head, experiments, subject_ids[0]]), None
    if len(subject_ids) < CITUS_SPLIT_FROM:
        return execute(FETCH[("citus", bool(head))], [*head, experiments, subject_ids]), None
    groups = execute(CITUS_BY_SHARD, [_json(subject_ids)])
    rows = execute(FETCH[("citus", bool(head))], [*head, experiments, groups[0][2]])
    for _, _, text in groups[1:]:
        rows += execute(CITUS_FETCH_ROWS, [experiments, text])
    return rows, {subject_id: shard for shard, ids, _ in groups for subject_id in ids}


def _json(value) -> str:
    return orjson.dumps(value).decode()


def _executor(cursor) -> Callable[[str, list | None], list[tuple]]:
    """`execute(sql, params) -> rows` on this cursor, as the Citus helpers above and below take it."""

    def execute(sql: str, params: list | None = None) -> list[tuple]:
        cursor.execute(sql, params)
        return cursor.fetchall()

    return execute


def _vendor() -> str:
    if connection.vendor != "postgresql":
        return "sqlite"
    return "citus" if assignments_distributed() else "postgresql"


class Fetched(NamedTuple):
    # experiment_pk's resource_version or experiment_catalog_version (assignments_fetch)
    version: int | None
    stored: Stored
    # On Citus, for a read split by shard, the shard of each subject ID asked; else None.
    shards: Shards | None


def assignments_fetch(*, subjects: dict[int, Sequence[str]], experiment_pk: int | None = None) -> Fetched:
    """The stored variant primary keys of those (experiment pk, subject ID) pairs that have one,
    and a version to check the caller's cached state with: `experiment_pk`'s resource_version
    (None if it is gone) or, without it, experiment_catalog_version."""
    vendor = _vendor()
    head = [] if experiment_pk is None else [experiment_pk]
    shards = None
    with statement_cursor(table=TABLE) as cursor:
        if vendor == "citus":
            subject_ids = sorted({sid for ids in subjects.values() for sid in ids})
            rows, shards = citus_fetch_rows(
                _executor(cursor), head=head, experiments=list(subjects), subject_ids=subject_ids
            )
        else:
            cursor.execute(
                FETCH[(vendor, experiment_pk is not None)],
                [*head, _json({str(pk): ids for pk, ids in subjects.items()})],
            )
            rows = cursor.fetchall()
    version = None
    stored = {}
    asked = {pk: set(ids) for pk, ids in subjects.items()} if vendor == "citus" else None
    for pk, subject_id, variant_pk, resource_version in rows:
        if pk is None:
            version = resource_version
        elif asked is None or subject_id in asked[pk]:
            stored[(pk, subject_id)] = variant_pk
    return Fetched(version, stored, shards)


# On Citus an INSERT ... SELECT from a JSON parameter is pulled through the coordinator:
# the rows are computed there, copied to every shard as an intermediate result, then
# inserted from it. A VALUES list of one shard's rows is routed straight to that shard.
# A batch's rows that a COPY could not store go as one such INSERT per shard (citus_store),
# each its own transaction: a row is correct alone, and one INSERT over several shards
# would be a distributed transaction, committed in two phases on every node it wrote to.
#
# The values are written into the statement as literals, quoted by psycopg as it quotes
# a client-side bound parameter, and the statement is sent without parameters: six
# parameters a row cost psycopg 19 ms of client CPU for 1000 rows (parsing a statement of
# 6000 placeholders and writing each value), the literals about 4 (bench/results/history.md,
# "The Citus batch's client work, and its insert shard by shard"). Each such statement is
# new text, so it is never prepared.
CITUS_INSERT = b"""
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, source, created_at)
VALUES %s
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING experiment_id, subject_id, variant_id
"""
CITUS_INSERT_ROW = b"(%s::bigint, %s, %s::bigint, %s::integer, %s, %s)"


def citus_insert(rows: Sequence[Sequence], created_at: datetime, *, context: BaseConnection) -> str:
    """CITUS_INSERT for these (experiment pk, subject ID, variant pk, cohort, source) rows, quoted for the psycopg
    connection `context`: a statement that takes no parameters."""
    literal = Transformer.from_context(context).as_literal
    created = literal(created_at)
    values = b", ".join([CITUS_INSERT_ROW % (*map(literal, row), created) for row in rows])
    return (CITUS_INSERT % values).decode(context.info.encoding)


CITUS_SHARDS = """
SELECT get_shard_id_for_distribution_column('assignments_assignment', x.subject_id)
FROM json_array_elements_text(%s::json) WITH ORDINALITY AS x(subject_id, ord) ORDER BY x.ord
"""


def citus_shard_rows(
    execute: Callable[[str, list], list[tuple]], rows: Sequence[Sequence], *, shards: Shards | None = None
) -> list[list[Sequence]]:
    """These rows grouped by the shard holding each row's subject, in shard order. The shard of each
    subject comes from `shards` (the batch's split read) or, where that lacks one, from the coordinator,
    asked through `execute(sql, params) -> rows`.

    A shard found by a read could have split since (a rebalance): a group then holds two shards' rows,
    which Citus still writes where each belongs, only in one distributed transaction."""
    if shards is None or any(row[1] not in shards for row in rows):
        found = execute(CITUS_SHARDS, [_json([row[1] for row in rows])])
        shards = {row[1]: shard for (shard,), row in zip(found, rows, strict=True)}
    by_shard: defaultdict[int, list[Sequence]] = defaultdict(list)
    for row in rows:
        by_shard[shards[row[1]]].append(row)
    return [by_shard[shard] for shard in sorted(by_shard)]


# A batch's rows from CITUS_SPLIT_FROM on go to each shard by COPY, which the coordinator
# routes row by row without parsing, planning and deparsing a VALUES list: a 1000-row
# batch on 4 shards cost 20 ms of the cluster's CPU that way against 39 as INSERTs
# (bench/results/history.md, "A Citus batch's rows by COPY"). The read found them
# new, so COPY, which has no ON CONFLICT, stores them all; a row stored meanwhile by
# another request fails that shard's COPY, whose rows then go by INSERT ... ON CONFLICT
# DO NOTHING. Citus passes a COPY's unique violation on as an internal error (XX000),
# without its code, so any failed COPY is followed by that INSERT: a COPY writes its
# shard's rows or none, and the INSERT's own error, if it fails too (a worker down), is
# the one raised. A shard's rows are sorted, so two batches meet on its index in one order.
CITUS_COPY = (
    "COPY assignments_assignment (experiment_id, subject_id, variant_id, cohort, source, created_at) FROM STDIN"
)


def citus_store(
    execute: Callable[[str, list | None], list[tuple]],
    copy: Callable[[Sequence[Sequence]], bool],
    rows: Sequence[Sequence],
    created_at: datetime,
    *,
    context: BaseConnection,
    shards: Shards | None = None,
) -> Stored:
    """Store these rows on Citus, skipping pairs already assigned; the rows stored here. Below
    CITUS_SPLIT_FROM rows, one INSERT (citus_insert) through `execute(sql, params) -> rows`; from there,
    each shard's rows in shard order (citus_shard_rows) through `copy(rows) -> bool`, which writes them
    with CITUS_COPY, each shard's on its own, or writes nothing and says False when it failed (one of them
    stored already): that shard's rows then go as one INSERT."""
    if len(rows) < CITUS_SPLIT_FROM:
        return _returned(execute(citus_insert(rows, created_at, context=context), None))
    stored: Stored = {}
    for group in citus_shard_rows(execute, rows, shards=shards):
        if copy(group):
            stored.update({(pk, subject_id): variant_pk for pk, subject_id, variant_pk, *_ in group})
        else:
            stored.update(_returned(execute(citus_insert(group, created_at, context=context), None)))
    return stored


def _returned(rows: list[tuple]) -> Stored:
    return {(pk, subject_id): variant_pk for pk, subject_id, variant_pk in rows}


def _copier(cursor, created_at: datetime) -> Callable[[Sequence[Sequence]], bool]:
    """citus_store's `copy` on this cursor: a shard's COPY, in a savepoint inside a transaction (a failed
    statement would end it), committed on its own outside one."""

    def copy(rows: Sequence[Sequence]) -> bool:
        savepoint = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
        try:
            with savepoint, connection.wrap_database_errors, cursor.copy(CITUS_COPY) as writer:
                for row in rows:
                    writer.write_row((*row, created_at))
        except DatabaseError:
            return False
        return True

    return copy


def assignments_insert(
    *, rows: Sequence[tuple[int, str, int, int, str]], created_at: datetime, shards: Shards | None = None
) -> Stored:
    """Insert (experiment pk, subject ID, variant pk, cohort, source) rows, given sorted by
    experiment and subject ID, skipping pairs already assigned; returns the rows this call inserted.

    On Citus a batch from CITUS_SPLIT_FROM rows on is written shard by shard (`shards`, from the
    batch's read, saves asking which shard holds each), each committed on its own outside a
    transaction: a failure part way keeps the shards written before it (citus_store)."""
    vendor = _vendor()
    created = connection.ops.adapt_datetimefield_value(created_at)
    if vendor == "citus":
        with connection.cursor() as cursor:
            return citus_store(
                _executor(cursor),
                _copier(cursor, created),
                rows,
                created,
                context=connection.connection,
                shards=shards,
            )
    sql = POSTGRES_INSERT if vendor == "postgresql" else SQLITE_INSERT
    with statement_cursor(table=TABLE) as cursor:
        cursor.execute(sql, [created, _json(rows)])
        return _returned(cursor.fetchall())


# The neighbourhood of a batch's new subjects, for following links (assignments/linking.py),
# walked once for the whole batch: every identifier within %(depth)s links of any of the
# starts, through the links both ways, with the links out of those nearer than %(depth)s
# and the assignments those of a following experiment's subject type have in it. The walk
# is shared: many new subjects near one busy identifier read its links once, not once
# each. Its rows carry their depth, so UNION ends it at that depth in a component full of
# cycles. On PostgreSQL each identifier's links are read at most %(fanout)s a side, so an
# identifier with a million links (a shared device, a bot) costs a bounded read. At most
# %(rows)s rows come back (linking.MAX_LINK_ROWS and one more, to tell that the bound was hit).
POSTGRES_NEIGHBOURS = """
    (SELECT l.subject_type_b_id, l.subject_id_b FROM idlinks_identifierlink l
     WHERE l.subject_type_a_id = {node}.type_id AND l.subject_id_a = {node}.subject_id LIMIT %(fanout)s)
    UNION ALL
    (SELECT l.subject_type_a_id, l.subject_id_a FROM idlinks_identifierlink l
     WHERE l.subject_type_b_id = {node}.type_id AND l.subject_id_b = {node}.subject_id LIMIT %(fanout)s)
"""

POSTGRES_LINK_GRAPH = """
WITH RECURSIVE walk(type_id, subject_id, depth) AS (
    SELECT (s.item ->> 0)::bigint, s.item ->> 1, 0 FROM json_array_elements(%(starts)s::json) AS s(item)
    UNION
    SELECT n.type_id, n.subject_id, w.depth + 1
    FROM walk w CROSS JOIN LATERAL ({walk_neighbours}) AS n(type_id, subject_id)
    WHERE w.depth < %(depth)s
), reached AS (
    SELECT type_id, subject_id, min(depth) AS depth FROM walk GROUP BY type_id, subject_id
), following AS (
    SELECT (f.item ->> 0)::bigint AS experiment_id, (f.item ->> 1)::bigint AS type_id
    FROM json_array_elements(%(following)s::json) AS f(item)
)
SELECT r.type_id, r.subject_id, n.type_id, n.subject_id, NULL::bigint, NULL::bigint, NULL::timestamptz
FROM reached r CROSS JOIN LATERAL ({reached_neighbours}) AS n(type_id, subject_id)
WHERE r.depth < %(depth)s
UNION ALL
SELECT r.type_id, r.subject_id, NULL, NULL, a.experiment_id, a.variant_id, a.created_at
FROM reached r
JOIN following f ON f.type_id = r.type_id
JOIN assignments_assignment a ON a.experiment_id = f.experiment_id AND a.subject_id = r.subject_id
LIMIT %(rows)s
""".replace("{walk_neighbours}", POSTGRES_NEIGHBOURS.format(node="w")).replace(
    "{reached_neighbours}", POSTGRES_NEIGHBOURS.format(node="r")
)

SQLITE_LINK_GRAPH = """
WITH RECURSIVE walk(type_id, subject_id, depth) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), 0 FROM json_each(%(starts)s)
    UNION
    SELECT l.subject_type_b_id, l.subject_id_b, w.depth + 1
    FROM walk w JOIN idlinks_identifierlink l ON l.subject_type_a_id = w.type_id AND l.subject_id_a = w.subject_id
    WHERE w.depth < %(depth)s
    UNION
    SELECT l.subject_type_a_id, l.subject_id_a, w.depth + 1
    FROM walk w JOIN idlinks_identifierlink l ON l.subject_type_b_id = w.type_id AND l.subject_id_b = w.subject_id
    WHERE w.depth < %(depth)s
), reached AS (
    SELECT type_id, subject_id, min(depth) AS depth FROM walk GROUP BY type_id, subject_id
), following(experiment_id, type_id) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(%(following)s)
)
SELECT r.type_id, r.subject_id, l.subject_type_b_id, l.subject_id_b, NULL, NULL, NULL
FROM reached r JOIN idlinks_identifierlink l ON l.subject_type_a_id = r.type_id AND l.subject_id_a = r.subject_id
WHERE r.depth < %(depth)s
UNION ALL
SELECT r.type_id, r.subject_id, l.subject_type_a_id, l.subject_id_a, NULL, NULL, NULL
FROM reached r JOIN idlinks_identifierlink l ON l.subject_type_b_id = r.type_id AND l.subject_id_b = r.subject_id
WHERE r.depth < %(depth)s
UNION ALL
SELECT r.type_id, r.subject_id, NULL, NULL, a.experiment_id, a.variant_id, a.created_at
FROM reached r
JOIN following f ON f.type_id = r.type_id
JOIN assignments_assignment a ON a.experiment_id = f.experiment_id AND a.subject_id = r.subject_id
LIMIT %(rows)s
"""


# Citus refuses a recursive CTE over a distributed table: there the walk reads one level
# per statement, each sent to every shard at once (links are found by either side, and
# only side a is the distribution column), and stops at the first level that adds nothing.
# Most new subjects have no links: one statement, then one for the assignments.
CITUS_LINKS = """
SELECT subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b FROM idlinks_identifierlink
WHERE subject_id_a = ANY(%(ids)s::text[]) OR subject_id_b = ANY(%(ids)s::text[])
LIMIT %(limit)s
"""

CITUS_LINKED_ASSIGNMENTS = """
SELECT experiment_id, subject_id, variant_id, created_at FROM assignments_assignment
WHERE experiment_id = ANY(%s::bigint[]) AND subject_id = ANY(%s::text[])
"""


def _citus_link_graph(cursor, starts: set[Node], following: dict[int, int], depth: int) -> LinkGraph:
    """What POSTGRES_LINK_GRAPH reads, level by level: the same links out of every identifier
    nearer than `depth`, up to FANOUT a side, and the same assignments; incomplete once a
    level would take the rows read past MAX_LINK_ROWS (here a hub's links are read whole, then
    cut to FANOUT a side, so the bound counts the rows read, not only those kept)."""
    frontier = set(starts)
    reached = set(frontier)
    rows: list[tuple] = []
    for _ in range(depth):
        limit = MAX_LINK_ROWS + 1 - len(rows)
        cursor.execute(CITUS_LINKS, {"ids": sorted({subject_id for _, subject_id in frontier}), "limit": limit})
        level = cursor.fetchall()
        if len(level) == limit:
            return LinkGraph(links=[], assignments={}, complete=False)
        taken: Counter[tuple[Node, str]] = Counter()
        found: set[Node] = set()
        for type_a, id_a, type_b, id_b in level:
            for node, other, side in (((type_a, id_a), (type_b, id_b), "a"), ((type_b, id_b), (type_a, id_a), "b")):
                if node in frontier and taken[(node, side)] < FANOUT:
                    taken[(node, side)] += 1
                    rows.append((*node, *other, None, None, None))
                    found.add(other)
        frontier = found - reached
        reached |= frontier
        if not frontier:
            break
    if following:
        cursor.execute(CITUS_LINKED_ASSIGNMENTS, [sorted(following), sorted({subject_id for _, subject_id in reached})])
        for experiment_pk, subject_id, variant_pk, created_at in cursor.fetchall():
            if (following[experiment_pk], subject_id) in reached:
                rows.append((following[experiment_pk], subject_id, None, None, experiment_pk, variant_pk, created_at))
    return link_graph(rows)


def _link_graph(*, starts: set[Node], following: dict[int, int], depth: int) -> LinkGraph:
    """The links within `depth` links of the starts, and the assignments the identifiers there have
    in the experiments of `following` (experiment pk -> its subject type pk)."""
    with connection.cursor() as cursor:
        if _vendor() == "citus":
            return _citus_link_graph(cursor, starts, following, depth)
        params = graph_params(starts=starts, following=following.items(), depth=depth)
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRES_LINK_GRAPH, params)
            return link_graph(cursor.fetchall())
        cursor.execute(SQLITE_LINK_GRAPH, params)
        # SQLite hands times back as text.
        return link_graph((*row[:6], row[6] and parse_datetime(row[6])) for row in cursor.fetchall())


def assignments_link_graph(*, asked: Sequence[Asked]) -> LinkGraph:
    """The links around these new subjects of experiments that follow links, and the assignments
    the identifiers there have in those experiments (assignments/linking.py); one statement for
    all, or on Citus one per level of links."""
    return _link_graph(
        starts={(type_pk, subject_id) for _, type_pk, subject_id in asked},
        following={pk: type_pk for pk, type_pk, _ in asked},
        depth=MAX_DEPTH,
    )


def identifier_link_graph(*, start: Node, depth: int) -> LinkGraph:
    """The links within `depth` links of one identifier, read by the hot path's statement with no
    experiment to follow: the same bounds on rows and on links per identifier."""
    return _link_graph(starts={start}, following={}, depth=depth)


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
