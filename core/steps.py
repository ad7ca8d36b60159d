"""A database conversation written once, as steps, and sent by a driver: the hot path's statements
(assignments/storage.py) with no connection of their own.

A step function is a generator. It yields each Statement and gets its rows back (a list), or has the
statement's error raised where it yielded, as a direct call would raise it; what it returns is the
outcome. A step can also be a function of no arguments, for work that only the sync connection can do
(Citus's reads and writes shard by shard): its value comes back the same way. `steps_run` sends them on
Django's connection. The steps hold the conversation's logic, so that a second driver (an async
connection's, as bench/minimal_asgi.py sends the minimal app's) sends the same statements in the same
order without a second copy of it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection

from core.database import statement_cursor


@dataclass(frozen=True)
class Statement:
    """One statement that returns rows (a read, or a write with RETURNING), for a driver to send as
    `cursor.execute(sql, params)` does: its rows come back."""

    sql: str
    params: Any = None
    # The table whose size decides whether the statement is prepared (core.database.statement_cursor);
    # None: Django's own cursor sends it, unprepared.
    prepared_for: str | None = None


T = TypeVar("T")
Step = Statement | Callable[[], Any]
Steps = Generator[Step, Any, T]


def steps_run(steps: Steps[T]) -> T:
    """The outcome of `steps`, their statements sent on Django's connection."""
    result: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        result, error = None, None
        try:
            result = _sent(step) if isinstance(step, Statement) else step()
        except Exception as caught:
            error = caught


def _sent(statement: Statement) -> list:
    cursor = connection.cursor() if statement.prepared_for is None else statement_cursor(table=statement.prepared_for)
    with cursor:
        cursor.execute(statement.sql, statement.params)
        return cursor.fetchall()
