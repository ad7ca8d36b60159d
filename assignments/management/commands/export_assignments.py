from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from assignments.exports import (
    ASSIGNMENT_COLUMNS,
    EXPORT_FORMATS,
    ExportFormat,
    LineSink,
    assignment_rows,
    atomic_output,
    rows_write,
    since_parse,
    streaming_read,
)
from assignments.models import Experiment
from assignments.selectors import experiment_get_ci


def _since_argument(value: str) -> dt.datetime:
    try:
        return since_parse(value)
    except ValueError as exc:
        # argparse prefixes "argument --since: ", naming the option.
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = (
        "Stream an experiment's assignments (experiment_id, subject_id, variant_id, cohort, created_at) "
        "as CSV or JSON Lines, oldest first, in constant memory."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--experiment", required=True, metavar="ID", help="experiment ID (any case)")
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="csv", help="csv (default) or jsonl")
        parser.add_argument(
            "--since",
            type=_since_argument,
            metavar="ISO8601",
            help="only assignments made at or after this time, e.g. 2026-11-01 or 2026-11-01T10:00:00Z "
            "(a time without offset is UTC)",
        )
        parser.add_argument(
            "--output",
            type=Path,
            metavar="FILE",
            help="write to FILE (replaced only once the export is complete) and print a summary; "
            "without it the data goes to stdout",
        )

    def handle(
        self,
        *args,
        experiment: str,
        format: ExportFormat,
        since: dt.datetime | None,
        output: Path | None,
        **options,
    ) -> None:
        found = self.experiment_find(experiment)
        if output is None:
            try:
                self.export(found, export_format=format, since=since, out=self.stdout)
            except BrokenPipeError:
                # The reader went away (`| head`). Point stdout at /dev/null so that
                # Python's final flush of the buffered rest does not raise again.
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.stdout.fileno())
                os.close(devnull)
                raise CommandError("stdout was closed before the export finished") from None
            return
        try:
            with atomic_output(output) as handle:
                count = self.export(found, export_format=format, since=since, out=handle)
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
        self.stdout.write(f"exported {count} assignments of {found.key} to {output}")

    def experiment_find(self, experiment_id: str) -> Experiment:
        found = experiment_get_ci(experiment_id=experiment_id)
        if found is None:
            raise CommandError(f"no experiment has the ID {experiment_id!r}")
        return found

    def export(
        self, experiment: Experiment, *, export_format: ExportFormat, since: dt.datetime | None, out: LineSink
    ) -> int:
        """Write the experiment's assignments to out; returns how many."""
        with streaming_read():
            rows = assignment_rows(experiment=experiment, since=since)
            return rows_write(rows=rows, columns=ASSIGNMENT_COLUMNS, export_format=export_format, out=out)
