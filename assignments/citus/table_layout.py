"""The layout of the service's tables on a Citus cluster, and turning a migrated database into it
(docs/how-to/scale-out-citus.md).

Assignments and identifier links grow with every subject: they are distributed
by the subject ID, and co-located, so one subject's rows of every experiment,
and the links it is side a of, live on one shard. The counts the triggers keep
are co-located with the assignments, so each shard's trigger writes its counts
on its own node, in its own transaction. Everything else is small and read by
every request or page: reference tables, copied to every node, so that any
shard can join them locally. Django's own tables (users, sessions, the admin's
log) stay on the coordinator, read only by staff pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from psycopg import sql

from core.citus import citus_version, distributed_forget
from idlinks.models import IdentifierLink


class NotCitus(Exception):
    """The database is not a Citus coordinator (with the distributed layout, where that is needed): nothing
    was changed."""


# In foreign-key order: a reference table's targets are reference tables first.
REFERENCE_TABLES = (
    "assignments_subjecttype",
    "assignments_lab",
    "assignments_layer",
    "assignments_experiment",
    "assignments_experimentholdout",
    "assignments_variant",
    "assignments_cohort",
    "assignments_resourcechange",
    "tokens_apitoken",
)


@dataclass(frozen=True)
class Distributed:
    table: str
    column: str
    colocate_with: str


DISTRIBUTED_TABLES = (
    Distributed("assignments_assignment", "subject_id", "default"),
    Distributed("assignments_assignmentcount", "shard", "assignments_assignment"),
    # idlinks' table, named by its model: by side a, each link beside its subject's assignments.
    Distributed(IdentifierLink._meta.db_table, "subject_id_a", "assignments_assignment"),
    # The change feed's log (assignments/data/change_log.py): a row's changes beside it, so a replacement or a
    # deletion and the move of the row's creation to the log are one transaction on one node.
    Distributed("assignments_assignmentchange", "subject_id", "assignments_assignment"),
)

# On a shard of assignments_assignment, the trigger functions of migration 0006 would
# write to the distributed counts table, which Citus refuses from a shard. These write
# to the co-located shard of the counts instead: the same node and transaction, so a
# rolled back insert rolls back its counts. The shard column names the writer. A shard
# has no identity of its own: IDs come from the node's range of the table's sequence.
# shard_name() gives the name quoted (and qualified when the schema is not on the path).
# Each connection looks the name up once per shard and keeps it in a setting of its own
# (COUNT_SHARD_SETTING): the lookup was 0.1 ms of a 0.25 ms firing for one new subject
# (bench/results/history.md, "One subject on Citus: its read and its count"). A shard's
# name never changes: a move keeps it, a split or a new shard count makes new shards.
CITUS_COUNT_SHARD_FUNCTION = """
CREATE OR REPLACE FUNCTION assignments_count_shard(assignment_shard text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT shard_name('assignments_assignmentcount'::regclass, counts.shardid)
    FROM pg_dist_shard own
    JOIN pg_dist_shard counts ON counts.shardminvalue = own.shardminvalue
    WHERE own.shardid = substring(assignment_shard FROM '_([0-9]+)$')::bigint
      AND counts.logicalrelid = 'assignments_assignmentcount'::regclass
$$
"""

CITUS_UPSERT = """
EXECUTE format($sql$
INSERT INTO %s AS c (id, experiment_id, cohort, variant_id, source, day, shard, assignments)
SELECT nextval('assignments_assignmentcount_id_seq'), *
FROM (SELECT experiment_id, cohort, variant_id, source, (created_at AT TIME ZONE 'UTC')::date, %L, {sign} count(*)
FROM {rows}
GROUP BY 1, 2, 3, 4, 5, 6
ORDER BY 1, 2, 3, 4, 5, 6) counts
ON CONFLICT (experiment_id, cohort, variant_id, source, day, shard)
DO UPDATE SET assignments = c.assignments + EXCLUDED.assignments
$sql$, count_shard, TG_TABLE_NAME || '-' || pg_backend_pid() % 32)
"""
COUNT_SHARD_SETTING = "'assignments.count_shard.' || TG_TABLE_NAME"


def _citus_count_function(name: str, *steps: tuple[str, str]) -> str:
    body = ";\n".join(CITUS_UPSERT.format(sign=sign, rows=rows) for rows, sign in steps)
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"DECLARE count_shard text := current_setting({COUNT_SHARD_SETTING}, true);\n"
        "BEGIN\n"
        "IF coalesce(count_shard, '') = '' THEN\n"
        "count_shard := assignments_count_shard(TG_TABLE_NAME);\n"
        f"PERFORM set_config({COUNT_SHARD_SETTING}, count_shard, false);\n"
        "END IF;\n"
        f"{body};\nRETURN NULL;\nEND\n$$"
    )


CITUS_COUNT_FUNCTIONS = (
    CITUS_COUNT_SHARD_FUNCTION,
    _citus_count_function("assignments_count_insert", ("new_rows", "")),
    _citus_count_function("assignments_count_delete", ("old_rows", "-")),
    _citus_count_function("assignments_count_update", ("old_rows", "-"), ("new_rows", "")),
)


def _citus_tables() -> dict[str, str]:
    """Each table Citus knows, by name: 'reference', 'distributed' or 'local'."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT logicalrelid::regclass::text, CASE WHEN partmethod = 'h' THEN 'distributed' "
            "WHEN repmodel = 't' THEN 'reference' ELSE 'local' END FROM pg_dist_partition"
        )
        return dict(cursor.fetchall())


def _shard_count(cursor) -> int:
    cursor.execute(
        "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = %s::regclass", [DISTRIBUTED_TABLES[0].table]
    )
    return cursor.fetchone()[0]


def _foreign_keys(tables: list[str]) -> list[tuple[str, str, str]]:
    """(table, constraint, definition) of the foreign keys of `tables`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'f' AND conrelid::regclass::text = ANY(%s) ORDER BY 1, 2",
            [tables],
        )
        return cursor.fetchall()


def citus_coordinator_ensure(command: str) -> None:
    """Raise NotCitus, naming `command`, unless the database is a Citus coordinator."""
    if citus_version() is None:
        raise NotCitus(
            f"the database {connection.settings_dict['NAME']!r} has no citus extension: {command} runs "
            "on a Citus coordinator (docs/how-to/scale-out-citus.md)"
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT citus_is_coordinator()")
        if not cursor.fetchone()[0]:
            raise NotCitus(f"this database is a Citus worker: run {command} on the coordinator")


# What Citus accepts for citus.shard_count.
SHARD_COUNT_MAX = 64000


def tables_distribute(*, shard_count: int | None = None) -> list[str]:
    """Turn the migrated database into the distributed layout; what was done, one line each (none if nothing).

    The distributed tables get `shard_count` shards each, or the server's
    citus.shard_count (32 unless set). Idempotent: tables already in the
    layout are left as they are. Raises NotCitus, having changed nothing, on a
    database without Citus or on a Citus worker, and ValueError, having changed
    nothing, when `shard_count` is out of range or differs from the shards the
    tables already have.
    """
    if shard_count is not None and not 1 <= shard_count <= SHARD_COUNT_MAX:
        raise ValueError(f"the shard count must be from 1 to {SHARD_COUNT_MAX}, not {shard_count}")
    citus_coordinator_ensure("distribute_tables")
    done: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        # One connection per node for the whole transaction: Citus refuses to propagate the
        # functions below after copying rows into shards over several connections.
        cursor.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        known = _citus_tables()
        if shard_count is not None:
            existing = _shard_count(cursor) if known.get(DISTRIBUTED_TABLES[0].table) == "distributed" else None
            if existing not in (None, shard_count):
                raise ValueError(
                    f"the tables are distributed in {existing} shards already: changing that rewrites every row "
                    "(Citus's alter_distributed_table), which distribute_tables does not do"
                )
            cursor.execute("SELECT set_config('citus.shard_count', %s, true)", [str(shard_count)])
        to_reference = [table for table in REFERENCE_TABLES if known.get(table) != "reference"]
        to_distribute = [d for d in DISTRIBUTED_TABLES if known.get(d.table) != "distributed"]
        # The foreign keys of the tables to convert are dropped first and added again once
        # every table is in place. Citus would turn the targets of a new reference table's
        # foreign keys into local Citus tables, which can no longer be distributed; and
        # copying existing rows into shards that have Django's deferred foreign keys leaves
        # checks pending, which the next change of those shards in the transaction refuses.
        foreign_keys = _foreign_keys([*to_reference, *(d.table for d in to_distribute)])
        for table, name, _ in foreign_keys:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        for table in to_reference:
            cursor.execute("SELECT create_reference_table(%s)", [table])
            done.append(f"reference table {table}")
        # The count triggers go with assignments_assignment to every shard (migration 0004),
        # off while Citus copies the existing rows there: their counts are in the counts already.
        cursor.execute("SET LOCAL citus.enable_unsafe_triggers = on")
        if to_distribute:
            cursor.execute("ALTER TABLE assignments_assignment DISABLE TRIGGER USER")
        for item in to_distribute:
            cursor.execute(
                "SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                [item.table, item.column, item.colocate_with],
            )
            done.append(f"distributed table {item.table} by {item.column}")
        if to_distribute:
            for statement in CITUS_COUNT_FUNCTIONS:
                cursor.execute(statement)
            cursor.execute("ALTER TABLE assignments_assignment ENABLE TRIGGER USER")
        for table, name, definition in foreign_keys:
            cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        # A multi-shard INSERT runs its shards one after another, in shard order, so that two
        # batches sharing new subjects on several shards take their locks in one order instead
        # of deadlocking across nodes (docs/how-to/scale-out-citus.md). Set for the database: every connection.
        cursor.execute(
            sql.SQL("ALTER DATABASE {} SET citus.multi_shard_modify_mode TO 'sequential'")
            .format(sql.Identifier(connection.settings_dict["NAME"]))
            .as_string(connection.connection)
        )
        cursor.execute("SET citus.multi_shard_modify_mode TO 'sequential'")
    distributed_forget()
    return done
