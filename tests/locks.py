"""Whether some session waits for a row lock another holds: on one server, or anywhere in a Citus cluster."""

from __future__ import annotations

import os

WAITS_POSTGRES = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
)
# On Citus the wait happens on the worker holding the row; this view gathers every node's waits.
WAITS_CITUS = "SELECT count(*) FROM citus_lock_waits"


def lock_waits_query() -> str:
    """A statement whose one value is the number of sessions waiting for a lock."""
    return WAITS_CITUS if os.environ.get("TEST_CITUS") == "1" else WAITS_POSTGRES
