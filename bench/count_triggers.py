"""Runs without the triggers that keep assignments_assignmentcount, to see what they cost the hot path.

The triggers (assignments/migrations/0004_assignment_count_triggers.py) add a
grouped upsert to every INSERT of assignments, in the same transaction. For an
"off" run they are disabled on the bench database; afterwards they are enabled
again and the assignments stored meanwhile are counted in one statement, so a
database kept with --keep-database still shows exact counts in the admin.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

import psycopg

from bench.database import DatabaseServer
from bench.scenarios import EXPERIMENT_ID

COUNT_TRIGGER_STATES = ("on", "off")

# USER: the count triggers only; the foreign keys' internal triggers stay on.
DISABLE = "ALTER TABLE assignments_assignment DISABLE TRIGGER USER"
ENABLE = "ALTER TABLE assignments_assignment ENABLE TRIGGER USER"

# The triggers' own upsert, as the migration's first fill uses it (shard 0), over what was stored since
# they were disabled: every run targets one experiment, so its (experiment_id, created_at) index finds those
# rows. Taken from the migration so that it always writes the columns the triggers write.
_triggers = importlib.import_module("assignments.migrations.0004_assignment_count_triggers")
CATCH_UP = _triggers.POSTGRES_UPSERT.format(
    shard="0",
    sign="",
    rows="""(SELECT * FROM assignments_assignment
            WHERE experiment_id = (SELECT id FROM assignments_experiment WHERE lower(key) = lower(%s))
            AND created_at >= %s) AS stored""",
)


@contextlib.contextmanager
def count_triggers_off(*, server: DatabaseServer, database: str, database_url: str) -> Iterator[None]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(DISABLE)
        (disabled_at,) = connection.execute("SELECT clock_timestamp()").fetchone()
    # Its transactions must be counted before the first run reads the database's counter.
    server.wait_without_clients(database)
    try:
        yield
    finally:
        # One transaction: ALTER TABLE keeps writers out until it commits, so every assignment is
        # counted once, by the catch-up or by the triggers.
        with psycopg.connect(database_url) as connection:
            connection.execute(ENABLE)
            connection.execute(CATCH_UP, [EXPERIMENT_ID, disabled_at])
        server.wait_without_clients(database)
