from __future__ import annotations

import datetime as dt
from pathlib import Path

from assignments.console.reports import experiment_assignments_total
from assignments.data.exports import ASSIGNMENT_COLUMNS, assignment_rows
from assignments.management.experiments import experiment_argument, experiment_named
from core.commands import ExportCommand
from core.exports import ExportFormat


class Command(ExportCommand):
    help = (
        "Stream an experiment's assignments (experiment_id, subject_id, variant_id, cohort, created_at, source) "
        "as CSV or JSON Lines, oldest first, in constant memory."
    )

    def add_arguments(self, parser) -> None:
        experiment_argument(parser)
        self.add_export_arguments(
            parser,
            since_help="only assignments made at or after this time, e.g. 2026-11-01 or 2026-11-01T10:00:00Z "
            "(a time without offset is UTC)",
        )

    def handle(
        self,
        *args,
        experiment: str,
        format: ExportFormat,
        since: dt.datetime | None,
        output: Path | None,
        spreadsheet_safe: bool,
        **options,
    ) -> None:
        found = experiment_named(experiment)
        count = self.export(
            rows=lambda: assignment_rows(experiment=found, since=since),
            columns=ASSIGNMENT_COLUMNS,
            export_format=format,
            output=output,
            total=experiment_assignments_total(found),
            unit="assignments",
            spreadsheet_safe=spreadsheet_safe,
        )
        if count is not None:
            self.stdout.write(f"exported {count} assignments of {found.key} to {output}")
