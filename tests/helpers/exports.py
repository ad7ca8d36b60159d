"""What the export commands write, read back: its CSV rows, and the server-side cursors open when it writes its
first row."""

from __future__ import annotations

import csv
import io

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
