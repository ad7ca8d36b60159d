"""The hot path's statements on Citus, where assignments_assignment is distributed by subject ID: a batch's
read and its write are one statement per shard (assignments/storage.py sends them there).

At the top level, not in the citus wing, because the hot path runs them; the wing
holds what turns a database into this layout (assignments/citus/).
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from psycopg import BaseConnection
from psycopg.adapt import Transformer

from core.citus import table_distributed
from core.database import json_text

# (experiment pk, subject ID) -> variant pk
Stored = dict[tuple[int, str], int]


def assignments_distributed() -> bool:
    """Whether assignments_assignment is a distributed Citus table, asked once per database connection:
    the hot path's statements take the form of this module there."""
    return table_distributed("assignments_assignment")


# On Citus the lateral lookup is refused (a lateral subquery over a table function with
# OFFSET). Filters on both columns let it route one subject's lookup to its one shard,
# head row included (experiments are a reference table, on every node), each shard
# probing the unique index; a batch's is split by shard (citus_fetch_rows). The filters
# select the cross product of the experiments and subject IDs: the caller keeps the pairs
# it asked for.
CITUS_FETCH_ROWS = """
SELECT experiment_id, subject_id, variant_id, cohort, source, NULL FROM assignments_assignment
WHERE experiment_id = ANY(%s::bigint[]) AND subject_id = ANY(%s::text[])
"""
# One subject ID, as a one-subject request reads it, is compared with `=`: with `= ANY` of a one-item array on
# the distribution column the same read cost the workers twice the CPU, 0.39 to 0.45 ms against 0.17 to 0.21
# (bench/results/history.md, "One subject on Citus: its read and its count").
CITUS_FETCH_SUBJECT = """
SELECT experiment_id, subject_id, variant_id, cohort, source, NULL FROM assignments_assignment
WHERE experiment_id = ANY(%s::bigint[]) AND subject_id = %s
"""


@functools.cache
def citus_fetch_sql(head_sql: str, *, one_subject: bool) -> str:
    """The read of a batch's stored rows after the head statement `head_sql` (the first row, a version to
    check the caller's cached state with: assignments/storage.py)."""
    return head_sql + "UNION ALL" + (CITUS_FETCH_SUBJECT if one_subject else CITUS_FETCH_ROWS)


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
    execute: Callable[[str, list], list[tuple]],
    *,
    head_sql: str,
    head: list,
    experiments: list[int],
    subject_ids: list[str],
) -> tuple[list[tuple], Shards | None]:
    """citus_fetch_sql's rows for these sorted subject IDs (the head statement's parameters in `head`), through
    `execute(sql, params) -> rows`: for one ID, compared with `=`; read shard by shard from CITUS_SPLIT_FROM IDs
    on; and then the shard of each ID (None below CITUS_SPLIT_FROM)."""
    if len(subject_ids) == 1:
        return execute(citus_fetch_sql(head_sql, one_subject=True), [*head, experiments, subject_ids[0]]), None
    fetch = citus_fetch_sql(head_sql, one_subject=False)
    if len(subject_ids) < CITUS_SPLIT_FROM:
        return execute(fetch, [*head, experiments, subject_ids]), None
    groups = execute(CITUS_BY_SHARD, [json_text(subject_ids)])
    rows = execute(fetch, [*head, experiments, groups[0][2]])
    for _, _, text in groups[1:]:
        rows += execute(CITUS_FETCH_ROWS, [experiments, text])
    return rows, {subject_id: shard for shard, ids, _ in groups for subject_id in ids}


def citus_executor(cursor) -> Callable[[str, list | None], list[tuple]]:
    """`execute(sql, params) -> rows` on this cursor, as this module's helpers take it."""

    def execute(sql: str, params: list | None = None) -> list[tuple]:
        cursor.execute(sql, params)
        return cursor.fetchall()

    return execute


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
        found = execute(CITUS_SHARDS, [json_text([row[1] for row in rows])])
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
        return _stored(execute(citus_insert(rows, created_at, context=context), None))
    stored: Stored = {}
    for group in citus_shard_rows(execute, rows, shards=shards):
        if copy(group):
            stored.update({(pk, subject_id): variant_pk for pk, subject_id, variant_pk, *_ in group})
        else:
            stored.update(_stored(execute(citus_insert(group, created_at, context=context), None)))
    return stored


def citus_copier(cursor, created_at: datetime) -> Callable[[Sequence[Sequence]], bool]:
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


def _stored(rows: list[tuple]) -> Stored:
    return {(pk, subject_id): variant_pk for pk, subject_id, variant_pk in rows}
