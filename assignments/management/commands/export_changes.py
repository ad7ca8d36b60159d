from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from django.core.management.base import CommandError

from assignments.data.changes import LIMIT_MAX, Change, change_retention, changes_page
from assignments.errors import CursorExpired
from core.commands import DataOutputCommand
from core.commitorder import Position
from core.exports import LineSink, atomic_output, rows_write

CSV_COLUMNS = (
    "cursor",
    "kind",
    "recorded_at",
    "experiment_id",
    "subject_id",
    "variant_id",
    "cohort",
    "created_at",
    "source",
    "subject_type_a",
    "subject_id_a",
    "subject_type_b",
    "subject_id_b",
)


def csv_row(change: Change) -> list:
    """The change flattened to CSV_COLUMNS, empty where its kind has no such field."""
    fields = {"cursor": change.position.cursor(), "kind": change.kind, **change.as_json()}
    record = fields.get("assignment") or fields.get("link")
    # A link's created_at is the link's, an assignment's the assignment's: both are "created_at".
    return [fields.get(column, record.get(column, "")) for column in CSV_COLUMNS]


class Command(DataOutputCommand):
    help = (
        "Write the change feed's changes (GET /changes) after a cursor, oldest first, in constant memory, as "
        "JSON Lines or CSV; then print `next cursor: <cursor>` on stderr. With --cursor-file, a job run again "
        "(or again after a crash) neither skips nor repeats a change."
    )

    def add_arguments(self, parser) -> None:
        start = parser.add_mutually_exclusive_group()
        start.add_argument("--after", metavar="CURSOR", help="the changes after this cursor (all kept ones without)")
        start.add_argument(
            "--cursor-file",
            type=Path,
            metavar="FILE",
            help="read the cursor from FILE when it exists, and replace it with the new one once the output is "
            "complete",
        )
        parser.add_argument(
            "--limit", type=int, metavar="N", help="write at most N changes (default: all that can be served)"
        )
        parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="jsonl (default) or csv")
        parser.add_argument(
            "--output", type=Path, metavar="FILE", help="write to FILE, replaced only once complete (default stdout)"
        )

    def handle(self, *args, after, cursor_file, limit, format, output, **options) -> None:
        if limit is not None and limit < 0:
            raise CommandError("--limit must be 0 or more", returncode=2)
        if cursor_file is not None and cursor_file.exists():
            after = cursor_file.read_text(encoding="ascii", errors="replace").strip()
        start = None if after is None else Position.parse(after)
        if after is not None and start is None:
            raise CommandError(f"{after!r} is not a cursor of this service", returncode=2)
        try:
            if output is None:
                position = self._write(self.stdout, start=start, limit=limit, export_format=format)
            else:
                try:
                    with atomic_output(output) as handle:
                        position = self._write(handle, start=start, limit=limit, export_format=format)
                except OSError as exc:
                    raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
        except CursorExpired:
            raise CommandError(
                "changes after the cursor are older than the changes kept (CHANGES_RETENTION_DAYS) and were "
                "dropped: make a fresh full copy with export_assignments (and export_id_links), then follow from "
                "a new cursor",
                returncode=2,
            ) from None
        self.stdout.flush()
        if cursor_file is not None:
            with atomic_output(cursor_file) as handle:
                handle.write(position.cursor() + "\n")
        # Plain, not styled as an error: a job reads it.
        self.stderr.write(f"next cursor: {position.cursor()}", style_func=str)

    def _write(self, out: LineSink, *, start: Position | None, limit: int | None, export_format: str) -> Position:
        """Write the changes; returns the feed's `next` after the last one written."""
        feed = FeedRead(start=start, limit=limit)
        if export_format == "csv":
            rows_write(rows=(csv_row(change) for change in feed), columns=CSV_COLUMNS, export_format="csv", out=out)
        else:
            for change in feed:
                out.write(json.dumps(change.as_json(), ensure_ascii=False) + "\n")
        return feed.next


class FeedRead:
    """The changes after `start` (from the oldest kept without it), page after page, at most `limit`; once
    read, `next` is where the feed goes on."""

    def __init__(self, *, start: Position | None, limit: int | None) -> None:
        self.next = start or change_retention().floor
        self._after = start
        self._limit = limit

    def __iter__(self) -> Iterator[Change]:
        remaining = self._limit
        while remaining is None or remaining > 0:
            size = LIMIT_MAX if remaining is None else min(remaining, LIMIT_MAX)
            page = changes_page(after=self._after, limit=size)
            yield from page.changes
            self.next = self._after = page.next
            if remaining is not None:
                remaining -= len(page.changes)
            if len(page.changes) < size:
                return
