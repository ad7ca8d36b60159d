"""The database as the tests need it besides the ORM: unreachable without mocks, its lock waits, all its text,
its connection options, whether it is a Citus cluster."""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from pathlib import Path

import pytest
from django.db import connection

from assignments.storage_citus import CITUS_SPLIT_FROM, assignments_distributed
from core.healthz import database_probe, probe_connection
from devtools.ports import free_port

on_citus = os.environ.get("TEST_CITUS") == "1"
"""The suite runs on a Citus coordinator whose tables are distributed (scripts/test-citus sets TEST_CITUS)."""
citus = pytest.mark.skipif(not on_citus, reason="needs the tables distributed on Citus (scripts/test-citus)")

WAITS_POSTGRES = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
)
# On Citus the wait happens on the worker holding the row; this view gathers every node's waits.
WAITS_CITUS = "SELECT count(*) FROM citus_lock_waits"


def batch_reads(batch: int) -> int:
    """The statements reading a batch's stored assignments take: one, or on Citus from CITUS_SPLIT_FROM
    subjects on, one asking which shard holds each and one per shard (assignments/storage.py,
    citus_fetch_rows). The tests' batches of that size have subjects on every shard."""
    if batch < CITUS_SPLIT_FROM or not assignments_distributed():
        return 1
    return 1 + assignments_shard_count()


def batch_inserts(rows: int) -> int:
    """The statements inserting a batch's new assignments take, after a read of as many subjects: one, or on
    Citus from CITUS_SPLIT_FROM rows on, a COPY per shard (assignments/storage.py, citus_store: the read
    found each subject's shard), each in a savepoint of its own inside a test's transaction."""
    if rows < CITUS_SPLIT_FROM or not assignments_distributed():
        return 1
    return assignments_shard_count() * (3 if connection.in_atomic_block else 1)


def assignments_shard_count() -> int:
    """The shards of assignments_assignment on this Citus cluster."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'assignments_assignment'::regclass")
        return cursor.fetchone()[0]


def lock_waits_query() -> str:
    """A statement whose one value is the number of sessions waiting for a lock, on one server or anywhere
    in a Citus cluster."""
    return WAITS_CITUS if on_citus else WAITS_POSTGRES


@contextlib.contextmanager
def database_unreachable():
    """Point the default database at an address where nothing answers, for outage tests without mocks.

    PostgreSQL gets a port nobody listens on (connections are refused), SQLite a
    path in a missing directory. Only new connections are affected: a PostgreSQL
    test closes the open connection first to make the service reconnect (so it
    needs django_db(transaction=True)); SQLite's in-memory test database keeps
    its one connection whatever the settings say. The health probe's kept
    connection is closed here, as an outage would break it, and its last
    success forgotten, as the outage would outlast it.
    """
    probe_connection.close()
    database_probe.forget()
    settings_dict = connection.settings_dict
    saved = {key: settings_dict[key] for key in ("NAME", "HOST", "PORT")}
    if connection.vendor == "postgresql":
        settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    else:
        settings_dict["NAME"] = str(Path(tempfile.gettempdir()) / f"missing-{uuid.uuid4().hex}" / "db.sqlite3")
    try:
        yield
    finally:
        settings_dict.update(saved)


def all_table_text() -> str:
    """Every row of every table of the database, as text."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)
