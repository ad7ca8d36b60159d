"""Whether the database is a Citus coordinator, and whether a table is distributed there.

The apps' statements take another form on a distributed table; each app asks about
its own tables (docs/explanation/architecture.md).
"""

from __future__ import annotations

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
