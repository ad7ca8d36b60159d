"""A database conversation written once, as steps, and sent by a driver: the hot path's statements
(assignments/storage.py) with no connection of their own.

A step function is a generator. It yields each Statement and gets its rows back (a list), or has the
statement's error raised where it yielded, as a direct call would raise it; what it returns is the
outcome. A step can also be a function of no arguments, for work that only the sync connection can do
(Citus's reads and writes shard by shard): its value comes back the same way. `steps_run` sends them on
Django's connection. The steps hold the conversation's logic, so that another driver sends the same
statements in the same order without a second copy of it; `steps_driven` and `steps_driven_async` are the
loop of any sync or async driver (the benchmark's minimal apps send their steps through them on psycopg's
connections). The two loops are twins because one awaits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection

from core.database import statement_cursor, with_live_connection


@dataclass(frozen=True)
class Statement:
    """One statement, for a driver to send as `cursor.execute(sql, params)` does: its rows come back (a list,
    empty for a statement that returns none)."""

    sql: str
    params: Any = None
    # Whether the statement is prepared where that is safe (core.database.statement_cursor): False, never
    # (Django's own cursor sends it); True, whatever the tables hold; a table's name, once that table is big.
    prepare: bool | str = False


T = TypeVar("T")
Step = Statement | Callable[[], Any]
Steps = Generator[Step, Any, T]


def steps_run(steps: Steps[T]) -> T:
    """The outcome of `steps`, their statements sent on Django's connection, each step run once more on a
    new connection if the kept one had broken (core.database.with_live_connection: every step of the hot
    path is a read, or a write that skips the rows it finds, in autocommit)."""
    return steps_driven(steps, _performed_live)


def steps_driven(steps: Steps[T], perform: Callable[[Any], Any]) -> T:
    """The outcome of `steps`, each step's value `perform(step)`, or its error thrown back in: the loop of a
    sync driver, whatever its connection (bench/baseline.py sends the minimal app's steps on psycopg's)."""
    result: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        result, error = None, None
        try:
            result = perform(step)
        except Exception as caught:
            error = caught


async def steps_driven_async(steps: Steps[T], perform: Callable[[Any], Awaitable[Any]]) -> T:
    """steps_driven with each step's value awaited: the loop of an async driver (bench/minimal_asgi.py's)."""
    result: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        result, error = None, None
        try:
            result = await perform(step)
        except Exception as caught:
            error = caught


def _performed_live(step: Step) -> Any:
    return with_live_connection(_performed, step)


def _performed(step: Step) -> Any:
    if not isinstance(step, Statement):
        return step()
    if step.prepare is False:
        cursor = connection.cursor()
    else:
        cursor = statement_cursor(table=None if step.prepare is True else step.prepare)
    with cursor:
        cursor.execute(step.sql, step.params)
        return cursor.fetchall() if cursor.description is not None else []
