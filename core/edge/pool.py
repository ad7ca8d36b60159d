"""The edge's statements sent on the event loop: a driver of steps (core/steps.py) on a pool of async psycopg
connections, for the hot paths of config.asgi on PostgreSQL.

It sends the statements as steps_run sends them on Django's connection, so that the
problem table and the steps' own handling answer the same errors:

- the connections are made from Django's own parameters for the database
  (DATABASE_URL, its options, the request timeouts of DATABASE_REQUEST_TIMEOUTS,
  Django's adapters), in autocommit, in UTC, renewed every DATABASE_CONN_MAX_AGE
  seconds;
- a statement is prepared where core.database.statement_cursor would prepare it,
  and bound as Django binds it otherwise (on the client);
- psycopg's errors are raised as Django's (django.db.utils), through the
  wrapper Django itself uses;
- a statement that fails because its connection broke (a database restart, a
  dropped idle connection) is sent once more on a new connection, the idle ones
  closed first, as with_live_connection retries on Django's;
- a connection is made when a request needs one and none is idle, so a database
  that refuses it, or does not answer within connect_timeout, fails that request
  at once, as Django's connection would: OperationalError, 503
  database_unavailable. psycopg_pool's pool makes its connections in the
  background and has a request wait out its whole timeout instead, which is why
  this small pool is written here; a request waits at most POOL_WAIT_SECONDS for
  another to give a connection back.

Function steps (a cache's misses) need Django's sync connection: they run
in the driver's threads, Django's upkeep of that connection (close_old_connections)
before each.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, close_old_connections, connections
from psycopg.pq import TransactionStatus

from core.database import PREPARE_MIN_TABLE_BYTES, TABLE_SIZE_SQL, with_live_connection
from core.steps import Statement, Step, Steps, steps_driven_async

T = TypeVar("T")

# Longer than a statement's bound (DATABASE_STATEMENT_TIMEOUT_MS, 3 s): a request waits this long at most for
# another to give a connection back, then fails 503.
POOL_WAIT_SECONDS = 5.0


class PoolDriver:
    def __init__(self, *, size: int) -> None:
        """At most `size` connections, each made when a statement needs one and none is idle (after
        gunicorn's fork)."""
        self.prepared = settings.DATABASE_PREPARED_STATEMENTS
        self.max_age = settings.DATABASES[DEFAULT_DB_ALIAS]["CONN_MAX_AGE"] or 0
        self.free = asyncio.Semaphore(size)
        # Idle connections, the newest last; when each connection was made.
        self.idle: list[psycopg.AsyncConnection] = []
        self.made: weakref.WeakKeyDictionary[psycopg.AsyncConnection, float] = weakref.WeakKeyDictionary()
        self.prepare_safe: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        # Never connected: it gives Django's connection parameters and maps psycopg's errors to Django's.
        self.wrapper = connections.create_connection(DEFAULT_DB_ALIAS)
        self.errors = self.wrapper.wrap_database_errors
        self.params: dict[str, Any] | None = None
        # Statements sent, for the tests that hold a request's cost (tests/core/edge/test_asgi.py).
        self.sent = 0

    async def run(self, steps: Steps[T], *, executor: Executor) -> T:
        """The outcome of `steps`: statements on one connection, taken at the first and given back at the end;
        function steps in `executor`'s threads."""
        held = _Held(self, executor)
        try:
            return await steps_driven_async(steps, held.perform)
        finally:
            held.release()

    async def take(self) -> psycopg.AsyncConnection:
        """An idle connection, or a new one; waits at most POOL_WAIT_SECONDS for one to be given back."""
        if self.free.locked():
            try:
                await asyncio.wait_for(self.free.acquire(), POOL_WAIT_SECONDS)
            except TimeoutError:
                raise OperationalError(f"no database connection was free within {POOL_WAIT_SECONDS:.0f} s") from None
        else:
            await self.free.acquire()
        try:
            while self.idle:
                raw = self.idle.pop()
                if time.monotonic() - self.made[raw] < self.max_age:
                    return raw
                await raw.close()
            with self.errors:
                raw = await psycopg.AsyncConnection.connect(**self.connection_params(), autocommit=True)
            self.made[raw] = time.monotonic()
            return raw
        except BaseException:
            self.free.release()
            raise

    def give_back(self, raw: psycopg.AsyncConnection) -> None:
        """Kept for the next request unless it broke, is in a transaction or is kept for no request
        (DATABASE_CONN_MAX_AGE 0)."""
        self.free.release()
        if self.max_age and not raw.closed and raw.info.transaction_status == TransactionStatus.IDLE:
            self.idle.append(raw)
        else:
            asyncio.get_running_loop().create_task(raw.close())

    def forget_idle(self) -> None:
        """Close the idle connections: what broke one (a restart, a failover) broke them too."""
        idle, self.idle = self.idle, []
        for raw in idle:
            asyncio.get_running_loop().create_task(raw.close())

    def connection_params(self) -> dict[str, Any]:
        if self.params is None:
            params = self.wrapper.get_connection_params()
            # Django's cursor classes are sync ones; the cursors here are chosen per statement.
            params.pop("cursor_factory", None)
            params["options"] = f"{params.get('options', '')} -c TimeZone={self.wrapper.timezone_name}".strip()
            self.params = params
        return self.params

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for raw in idle:
            await raw.close()

    async def execute(self, raw: psycopg.AsyncConnection, statement: Statement) -> list:
        self.sent += 1
        with self.errors:
            prepare = statement.prepare is not False and self.prepared
            if prepare and statement.prepare is not True:
                safe = self.prepare_safe.get(raw)
                if safe is None:
                    safe = self.prepare_safe[raw] = await _table_is_large(raw, statement.prepare)
                prepare = safe
            if prepare:
                cursor = await raw.execute(statement.sql, statement.params, prepare=True)
            else:
                cursor = await psycopg.AsyncClientCursor(raw).execute(statement.sql, statement.params)
            return await cursor.fetchall() if cursor.description is not None else []


class _Held:
    """One request's connection: taken for its first statement, replaced once if it broke."""

    def __init__(self, driver: PoolDriver, executor: Executor) -> None:
        self.driver = driver
        self.executor = executor
        self.raw: psycopg.AsyncConnection | None = None

    async def perform(self, step: Step) -> Any:
        if not isinstance(step, Statement):
            return await in_thread(self.executor, step)
        if self.raw is None:
            self.raw = await self.driver.take()
        try:
            return await self.driver.execute(self.raw, step)
        except OperationalError:
            if not self.raw.broken and not self.raw.closed:
                raise
        # As with_live_connection on Django's connection: a connection that broke is replaced, once.
        self.release()
        self.driver.forget_idle()
        self.raw = await self.driver.take()
        return await self.driver.execute(self.raw, step)

    def release(self) -> None:
        if self.raw is not None:
            raw, self.raw = self.raw, None
            self.driver.give_back(raw)


async def _table_is_large(raw: psycopg.AsyncConnection, table: str) -> bool:
    cursor = await raw.execute(TABLE_SIZE_SQL, [table])
    return (await cursor.fetchone())[0] >= PREPARE_MIN_TABLE_BYTES


async def in_thread(executor: Executor, function: Callable[[], T]) -> T:
    """`function()` in one of `executor`'s threads, in this task's context (its request ID, its log line's
    notes), on that thread's Django connection, with Django's upkeep of it first."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(executor, context.run, _on_django_connection, function)


def _on_django_connection(function: Callable[[], T]) -> T:
    # What Django's handler does for its connections at a request's start: drop one that is obsolete or broken.
    close_old_connections()
    return with_live_connection(function)
