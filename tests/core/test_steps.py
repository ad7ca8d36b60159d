"""Steps and their drivers (core/steps.py): statements sent in the order yielded, their rows or errors
given back where they were yielded, the outcome returned."""

from __future__ import annotations

import asyncio

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from core.steps import Statement, steps_driven, steps_driven_async, steps_run


def numbered(*numbers: int):
    """One statement per number, each answering it: the outcome is every answer, in order."""
    answers = []
    for number in numbers:
        rows = yield Statement("SELECT %s", [number])
        answers.append(rows[0][0])
    return answers


def nested():
    first = yield from numbered(1)
    second = yield from numbered(2, 3)
    return first + second


@pytest.mark.django_db
def test_steps_run__statements__sent_in_order_on_djangos_connection_and_their_rows_given_back():
    with CaptureQueriesContext(connection) as captured:
        outcome = steps_run(nested())

    assert outcome == [1, 2, 3]
    assert len(captured.captured_queries) == 3


@pytest.mark.django_db
def test_steps_run__a_statement_fails__its_error_raised_where_it_was_yielded():
    def caught():
        try:
            # On PostgreSQL a failed statement leaves its transaction unusable: a savepoint of its own, rolled
            # back as the error passes out of it.
            with transaction.atomic():
                yield Statement("SELECT * FROM no_such_table")
        except DatabaseError as error:
            # And the connection goes on with the next statement.
            rows = yield Statement("SELECT 1")
            return type(error).__name__, rows[0][0]
        return "no error", None

    # ProgrammingError on PostgreSQL, OperationalError on SQLite.
    assert steps_run(caught()) in {("ProgrammingError", 1), ("OperationalError", 1)}


@pytest.mark.django_db
def test_steps_run__uncaught_error__raised_to_the_caller_and_the_steps_closed():
    def failing():
        yield Statement("SELECT 1")
        yield lambda: 1 / 0
        yield Statement("SELECT 2")

    steps = failing()
    with pytest.raises(ZeroDivisionError):
        steps_run(steps)

    # The generator ended with the error: nothing after it is sent.
    assert steps.gi_frame is None


@pytest.mark.django_db
def test_steps_run__a_function_step__called_and_its_value_given_back():
    def with_function():
        value = yield lambda: "called"
        rows = yield Statement("SELECT %s", [value])
        return rows[0][0]

    assert steps_run(with_function()) == "called"


def test_steps_driven__another_driver__the_same_steps_answered_by_it():
    sent = []

    def perform(step):
        sent.append(step.sql)
        return [(step.params[0] * 10,)]

    assert steps_driven(nested(), perform) == [10, 20, 30]
    assert sent == ["SELECT %s"] * 3


def test_steps_driven_async__an_async_driver__the_same_outcome_and_errors_thrown_back():
    async def perform(step):
        await asyncio.sleep(0)
        if step.params == [2]:
            raise LookupError("two")
        return [(step.params[0],)]

    def tolerant():
        answers = []
        for number in (1, 2, 3):
            try:
                rows = yield Statement("SELECT %s", [number])
            except LookupError as error:
                answers.append(str(error))
            else:
                answers.append(rows[0][0])
        return answers

    assert asyncio.run(steps_driven_async(tolerant(), perform)) == [1, "two", 3]
