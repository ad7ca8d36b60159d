"""What the service's commands share: the version they report, and for the streaming exports their
options and where the rows go.

A reader that closes stdout early (`| head`) has taken what it wanted from a command whose output is data
(DataOutputCommand); any other command stops with a short message (manage.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.exports import (
    EXPORT_FORMATS,
    ExportFormat,
    LineSink,
    atomic_output,
    rows_write,
    since_parse,
    streaming_read,
)
from core.progress import counted, progress_bar
from core.version import VERSION


def since_argument(value: str) -> dt.datetime:
    try:
        return since_parse(value)
    except ValueError as exc:
        # argparse prefixes "argument --since: ", naming the option.
        raise argparse.ArgumentTypeError(str(exc)) from None


class ServiceCommand(BaseCommand):
    """The base of the service's own commands: `--version` prints the service's version, not Django's.

    Django's own commands (migrate, runserver, createsuperuser, ...) keep printing Django's version.
    """

    def get_version(self) -> str:
        return VERSION


class DataOutputCommand(ServiceCommand):
    """A command whose stdout is data (an export, a report), which only reads: a reader that closes the pipe
    early (`| head`) is normal, so the command stops there quietly and exits 0, as `git log | head` does."""

    def execute(self, *args, **options):
        try:
            output = super().execute(*args, **options)
            # Within the try: what is still buffered would otherwise meet the closed pipe at exit.
            self.stdout.flush()
        except BrokenPipeError:
            # What is still buffered then goes to /dev/null at exit instead of failing again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return None
        return output


class ExportCommand(DataOutputCommand):
    """A command that streams rows as CSV or JSON Lines to stdout, or to a file replaced only when complete."""

    def add_export_arguments(self, parser, *, since_help: str) -> None:
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="csv", help="csv (default) or jsonl")
        parser.add_argument("--since", type=since_argument, metavar="ISO8601", help=since_help)
        parser.add_argument(
            "--output",
            type=Path,
            metavar="FILE",
            help="write to FILE (replaced only once the export is complete) and print a summary; "
            "without it the data goes to stdout",
        )
        parser.add_argument(
            "--spreadsheet-safe",
            action="store_true",
            help="CSV only: prefix with ' every value that starts with =, +, -, @, a tab or a carriage return, "
            "as OWASP recommends, so that a spreadsheet shows it as text instead of running it as a formula; "
            "the values are then no longer exact (without it they are)",
        )

    def export(
        self,
        *,
        rows: Callable[[], Iterable[Sequence[Any]]],
        columns: Sequence[str],
        export_format: ExportFormat,
        output: Path | None,
        total: int | None,
        unit: str,
        spreadsheet_safe: bool = False,
    ) -> int | None:
        """Stream rows() out; returns how many were written to `output`, or None when they went to stdout.

        A progress bar goes to stderr when it is a terminal (`total` is an estimate for it).
        """
        if spreadsheet_safe and export_format != "csv":
            # Refused rather than ignored: whoever asked for it expects a file a spreadsheet can open safely.
            raise CommandError("--spreadsheet-safe applies to --format csv only", returncode=2)

        def write(out: LineSink) -> int:
            # closing(): a write that fails (a closed pipe, a full disk) stops the read at once,
            # while its cursor and connection are still open, not later in the garbage collector.
            with (
                streaming_read(),
                progress_bar(total=total, unit=unit, description="exporting") as bar,
                contextlib.closing(counted(rows(), bar)) as source,
            ):
                return rows_write(
                    rows=source,
                    columns=columns,
                    export_format=export_format,
                    out=out,
                    spreadsheet_safe=spreadsheet_safe,
                )

        if output is None:
            write(self.stdout)
            return None
        try:
            with atomic_output(output) as handle:
                return write(handle)
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
