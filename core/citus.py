"""Whether the database is a Citus coordinator, and whether a table is distributed there.

The apps' statements take another form on a distributed table; each app asks about
its own tables (docs/explanation/architecture.md).
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from django.db import connection


def citus_version() -> str | None:
    """The Citus version installed in the database, or None (also on SQLite)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'")
        row = cursor.fetchone()
    return row[0] if row else None


_distributed: weakref.WeakKeyDictionary[Any, dict[str, bool]] = weakref.WeakKeyDictionary()

# Asked in turn: the second names Citus's catalog, which exists only with the extension. A database
# not migrated yet (add_worker asks before anything else) has no table to distribute: to_regclass is null.
CITUS_INSTALLED = "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')"
TABLE_DISTRIBUTED = (
    "SELECT EXISTS (SELECT FROM pg_dist_partition WHERE partmethod = 'h' AND logicalrelid = to_regclass(%s))"
)


def distributed_asked(cursor, table: str) -> bool:
    """Whether `table` is a distributed Citus table, asked through this PostgreSQL cursor (Django's or
    psycopg's), every time."""
    cursor.execute(CITUS_INSTALLED)
    if not cursor.fetchone()[0]:
        return False
    cursor.execute(TABLE_DISTRIBUTED, [table])
    return cursor.fetchone()[0]


def table_distributed(table: str) -> bool:
    """Whether `table` is a distributed Citus table, asked once per database connection.

    A process that was running when distribute_tables ran keeps its connections'
    answer until they are renewed (DATABASE_CONN_MAX_AGE): restart it.
    """
    if connection.vendor != "postgresql":
        return False
    connection.ensure_connection()
    raw = connection.connection
    known = _distributed.setdefault(raw, {})
    if table not in known:
        with connection.wrap_database_errors, raw.cursor() as cursor:
            known[table] = distributed_asked(cursor, table)
    return known[table]


def distributed_forget() -> None:
    """Forget what this connection was told by table_distributed: its tables have just been distributed."""
    if connection.connection is not None:
        _distributed.pop(connection.connection, None)


# Citus commits a transaction that wrote on several nodes in two phases: prepared on each worker, committed
# on the coordinator, then committed on each worker. Between the last two, its rows are not visible yet on
# the workers, though the coordinator has ended it.
WORKERS_PREPARED = """
SELECT result FROM run_command_on_workers(
    $$SELECT coalesce(string_agg(gid, ' '), '') FROM pg_prepared_xacts WHERE database = current_database()$$
)
"""


def workers_prepared_settled(*, timeout: float) -> bool:
    """Wait until every transaction prepared on a worker when this is called has been committed or rolled
    back there; False if some still are not after `timeout` seconds (a coordinator that crashed between the
    two phases leaves them to Citus's recovery, within a minute)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        pending = _prepared_on_workers(cursor)
        while pending:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
            pending &= _prepared_on_workers(cursor)
    return True


def _prepared_on_workers(cursor) -> set[str]:
    cursor.execute(WORKERS_PREPARED)
    return {gid for (result,) in cursor.fetchall() for gid in (result or "").split()}
