"""The web server's database connections: a kept one that broke replaced, bounded time, prepared statements."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

import orjson
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.db.backends.postgresql.base import ServerBindingCursor as DjangoServerBindingCursor

# Named as before the module moved: log routing and docs/reference/metrics-and-logs.md know it by this name.
logger = logging.getLogger("config.database")

P = ParamSpec("P")
R = TypeVar("R")


def with_live_connection(function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """`function(*args, **kwargs)`, run once more on a new connection if the kept one had broken.

    Connections live across requests (CONN_MAX_AGE). After a database restart or
    a failover, or once a network device dropped an idle one, the first statement
    on it fails. Testing the connection before every request would cost a round
    trip each time; instead a failure on a connection this call did not open, that
    no longer answers, is retried once on a new one. Only for idempotent work
    outside a transaction: both assignment endpoints and /id-link are, since a
    retry finds the rows the first attempt may have stored and answers with them.
    A failure on a new connection, or on one that still answers, is not retried.
    """
    wrapper = connections[DEFAULT_DB_ALIAS]
    kept = wrapper.connection is not None and not wrapper.in_atomic_block
    try:
        return function(*args, **kwargs)
    except (OperationalError, InterfaceError):
        if not kept or wrapper.is_usable():
            raise
        logger.info("database connection kept from an earlier request had broken; retrying on a new one")
        wrapper.close()
        return function(*args, **kwargs)


# Statements are prepared on a connection only if the table they read was at least
# this big when the connection first ran one. PostgreSQL switches a prepared
# statement to a generic plan after five runs and keeps it until the table is
# analysed again; a generic plan made on a small table scans it (a hash join over
# the experiment's rows), and kept while the table grows, that takes a request
# from a millisecond to a second. From this size on, every plan the planner
# makes probes the unique index, and so does the one it keeps. A connection that
# found the table smaller plans every statement afresh; connections are renewed
# every DATABASE_CONN_MAX_AGE seconds, so a growing table is soon prepared for.
PREPARE_MIN_TABLE_BYTES = 16 * 1024 * 1024

_prepare_safe: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


class _PreparingCursor(DjangoServerBindingCursor):
    """Parameters bound by the server, and every statement prepared on the first run.

    Preparing saves PostgreSQL parsing and planning the hot path's statements
    on every request, about half of their server time (bench/results/prepared.md).
    """

    def execute(self, query, params=None, *, prepare=True, binary=None):
        return super().execute(query, params, prepare=prepare, binary=binary)


# A table's size, which decides whether statements on it are prepared (PREPARE_MIN_TABLE_BYTES): asked here
# on Django's connection and by the event loop's pool on its own (core/edge/pool.py).
TABLE_SIZE_SQL = "SELECT pg_relation_size(%s::regclass)"


def _table_is_large(raw, table: str) -> bool:
    with raw.cursor() as cursor:
        cursor.execute(TABLE_SIZE_SQL, [table])
        return cursor.fetchone()[0] >= PREPARE_MIN_TABLE_BYTES


def statement_cursor(*, table: str | None):
    """A cursor for the hot path's statements: one that prepares them where that is safe (PostgreSQL,
    DATABASE_PREPARED_STATEMENTS on, `table` big enough), else Django's own.

    `table` is the one whose size the statements' plans depend on; None for statements that have
    one plan whatever the tables hold (an INSERT of VALUES, probing only its unique index).
    """
    # The wrapper itself, not the `connection` proxy, which looks it up again on every attribute.
    wrapper = connections[DEFAULT_DB_ALIAS]
    # Logged queries (DEBUG, a test capturing them) show their SQL from Django's cursor only: psycopg's
    # server-side binding keeps no composed query for Django to log.
    if wrapper.vendor != "postgresql" or not settings.DATABASE_PREPARED_STATEMENTS or wrapper.queries_logged:
        return wrapper.cursor()
    wrapper.ensure_connection()
    raw = wrapper.connection
    if table is not None:
        safe = _prepare_safe.get(raw)
        if safe is None:
            with wrapper.wrap_database_errors:
                safe = _prepare_safe[raw] = _table_is_large(raw, table)
        if not safe:
            return wrapper.cursor()
    return wrapper.make_cursor(_PreparingCursor(raw))


def timestamp_param(value: datetime, *, vendor: str) -> Any:
    """A timestamp as a statement's parameter for `vendor`'s database, as Django's field would send it. On
    PostgreSQL psycopg takes it as it is, and no connection is looked up: steps sent on the event loop
    (core/edge) never touch Django's connections there."""
    return value if vendor != "sqlite" else connections[DEFAULT_DB_ALIAS].ops.adapt_datetimefield_value(value)


def json_text(value) -> str:
    """`value` as one JSON text parameter, the form in which the apps' set-based statements take a batch
    (expanded by the database: json_array_elements on PostgreSQL, json_each on SQLite)."""
    return orjson.dumps(value).decode()


def message_first_line(exc: BaseException) -> str:
    """What failed, in one line: drivers add hints on further lines ("Is the server running...")."""
    return (str(exc).strip().splitlines() or [""])[0]


def database_failure_line(exc: BaseException) -> str:
    """A command's one-line answer when the database cannot be used: which database, and the driver's
    first line ("database ... does not exist", "connection refused")."""
    settings_dict = connections[DEFAULT_DB_ALIAS].settings_dict
    where = settings_dict["NAME"]
    if settings_dict.get("HOST"):
        where = f"{where} on {settings_dict['HOST']}:{settings_dict.get('PORT') or 5432}"
    return f"error: cannot use the database {where} (DATABASE_URL): {message_first_line(exc) or type(exc).__name__}"
