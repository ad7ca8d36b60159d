"""Streaming exports of stored rows as CSV or JSON Lines, in constant memory (every app's exports).

Rows come from the database through a chunked iterator (a server-side cursor
on PostgreSQL), are formatted one at a time and written straight out; nothing
holds the whole result. A file is written next to its destination and renamed
over it only once complete, so a failed export never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

from django.db import connection, transaction
from django.db.models import Q

ExportFormat = Literal["csv", "jsonl"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("csv", "jsonl")

# A spreadsheet reads a cell that starts with one of these as a formula, which can run commands or send
# the sheet's data away ("CSV injection", OWASP). --spreadsheet-safe prefixes such a cell with "'",
# which the spreadsheet shows as text and does not display.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

# Rows fetched per round trip: large enough that the round trips cost little,
# small enough that a chunk of 256-character subject IDs stays around a megabyte.
CHUNK_SIZE = 2000


class LineSink(Protocol):
    def write(self, text: str, /) -> Any: ...


def since_parse(value: str) -> dt.datetime:
    """An aware datetime from an ISO 8601 date or date-time; naive values are UTC.

    Accepts `2026-11-01`, `2026-11-01T10:00:00Z`, `2026-11-01 10:00:00+02:00`.
    """
    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"expected an ISO 8601 date or date-time such as 2026-11-01 or 2026-11-01T10:00:00Z, got {value!r}"
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    try:
        # Stored and read back in UTC: a time that is in range only in its own offset
        # (0001-01-01T00:00+01:00) could be written but never read again.
        return moment.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError(f"{value!r} is outside the years 1 to 9999 in UTC") from None


def timestamp_format(moment: dt.datetime) -> str:
    """ISO 8601 in UTC with a fixed width: `2026-11-01T10:00:00.000000Z`."""
    # isoformat is about three times faster than strftime, which counts at a million rows.
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


@contextlib.contextmanager
def streaming_read() -> Iterator[None]:
    """The database context a long chunked read should run in.

    PostgreSQL: a transaction, because outside one Django declares its server-side
    cursors WITH HOLD, and PostgreSQL materialises such a cursor's entire result
    when the declaring statement commits, before the first row is sent. Inside a
    transaction the cursor streams. SQLite: no transaction, because ours begin
    IMMEDIATE (settings.py), which would block every writer for the whole export;
    its cursor streams in autocommit mode anyway.
    """
    if connection.vendor == "postgresql":
        with transaction.atomic():
            yield
    else:
        yield


def time_ordered(
    queryset, fields: Sequence[str], *, chunk_size: int, paged: bool, since: dt.datetime | None = None
) -> Iterator[tuple]:
    """`fields` of the queryset's rows created at or after `since` (all with None), in (created_at, id)
    order, read chunk by chunk.

    By default through a server-side cursor, which streams (see streaming_read).
    `paged` (Citus) reads page after page from where the last ended instead: a
    cursor over a distributed table gathers and sorts every row on the
    coordinator before sending the first, while each page has every shard send
    its next `chunk_size` rows in index order, so the coordinator merges at most
    a page per shard whatever the table's size.
    """
    if since is not None:
        queryset = queryset.filter(created_at__gte=since)
    ordered = queryset.order_by("created_at", "id")
    if not paged:
        yield from ordered.values_list(*fields).iterator(chunk_size=chunk_size)
        return
    page = ordered
    while True:
        rows = list(page.values_list("created_at", "id", *fields)[:chunk_size])
        for row in rows:
            yield row[2:]
        if len(rows) < chunk_size:
            return
        created_at, pk = rows[-1][:2]
        page = ordered.filter(Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=pk))


def spreadsheet_cell(value: Any) -> Any:
    """The value as a spreadsheet shows it as text: a string that starts like a formula gets a "'" first."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def rows_write(
    *,
    rows: Iterable[Sequence[Any]],
    columns: Sequence[str],
    export_format: ExportFormat,
    out: LineSink,
    spreadsheet_safe: bool = False,
) -> int:
    """Write rows to out as CSV (with a header) or JSON Lines; returns the number of rows.

    Every write is one whole line, so `out` may be a Django command's stdout.
    CSV quotes fields holding commas, quotes or line breaks (RFC 4180) and ends
    lines with LF, so line-oriented tools see one row per line. The values are
    exact unless `spreadsheet_safe` (CSV only) defuses formulas (spreadsheet_cell).
    """
    if spreadsheet_safe and export_format != "csv":
        raise ValueError("spreadsheet_safe applies to CSV only")
    count = 0
    if export_format == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([spreadsheet_cell(value) for value in row] if spreadsheet_safe else row)
            count += 1
    elif export_format == "jsonl":
        for row in rows:
            out.write(json.dumps(dict(zip(columns, row, strict=True)), ensure_ascii=False) + "\n")
            count += 1
    else:
        raise ValueError(f"unknown export format {export_format!r}")
    return count


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[TextIO]:
    """A UTF-8 text file that appears at path, complete, only if the block succeeds.

    The temporary file sits in the same directory, so the final rename is atomic
    (same file system); it is flushed to disk before the rename, so a crash
    leaves either the old file or the whole new one. The file gets the mode a
    plain `open()` would give it (0666 less the umask), not mkstemp's 0600.
    """
    directory = path.parent
    fd, temporary_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".partial")
    temporary = Path(temporary_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(directory)


def _umask() -> int:
    # The only way to read the umask is to set it; set it straight back.
    current = os.umask(0o022)
    os.umask(current)
    return current


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (the directory entry lives in the directory)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
