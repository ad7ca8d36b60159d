"""What the export commands write, read back: its CSV rows, and the server-side cursors open when it writes its
first row; the rows and --since values both export commands are tested with."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

from django.db import connection


def csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


class CursorProbe(io.StringIO):
    """A stdout that, at the first row written, records the server-side cursors open on the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.cursors: list[tuple[str, bool]] | None = None

    def write(self, text: str) -> int:
        if self.cursors is None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT statement, is_holdable FROM pg_cursors")
                self.cursors = cursor.fetchall()
        return super().write(text)

    def held(self, name: str) -> bool:
        """Whether the one server-side cursor open at the first row whose statement names `name` was declared WITH
        HOLD."""
        assert self.cursors is not None, "nothing was written"
        holdable = [holdable for statement, holdable in self.cursors if name in statement]
        assert len(holdable) == 1, self.cursors
        return holdable[0]

    def json_lines(self) -> list:
        """What was written, read as JSON Lines."""
        return [json.loads(line) for line in self.getvalue().splitlines()]


# Rows made around 10:00 UTC on 1 November 2026, by name: the --since tests of both export commands store one
# row at each moment.
SINCE_ROWS = [
    ("before", dt.datetime(2026, 11, 1, 9, 59, 59, 999_999, tzinfo=dt.UTC)),
    ("at-10:00", dt.datetime(2026, 11, 1, 10, tzinfo=dt.UTC)),
    ("at-11:00", dt.datetime(2026, 11, 1, 11, tzinfo=dt.UTC)),
    ("next-day", dt.datetime(2026, 11, 2, tzinfo=dt.UTC)),
]
# --since values and the rows of SINCE_ROWS each keeps (those made at or after it), for both commands: they read
# --since alike (core/exports.py, since_parse).
SINCE_CASES = [
    ("2026-11-01", ["before", "at-10:00", "at-11:00", "next-day"]),
    ("2026-11-01T10:00:00Z", ["at-10:00", "at-11:00", "next-day"]),
    ("2026-11-01T11:00:00", ["at-11:00", "next-day"]),
    ("2026-11-01T12:00:00+01:00", ["at-11:00", "next-day"]),
    ("2026-11-02", ["next-day"]),
    ("2030-01-01", []),
]
