from __future__ import annotations

import json

from assignments.console.reports import ExperimentReport, experiment_report
from assignments.management.experiments import experiment_argument, experiment_named
from core.commands import DataOutputCommand

TABLE_COLUMNS = ("cohort", "variant", "assignments", "expected", "observed", "srm p-value")
RIGHT_ALIGNED = {"cohort", "assignments", "expected", "observed", "srm p-value"}


class Command(DataOutputCommand):
    help = (
        "Per cohort and variant of an experiment: assignments, expected and observed share, "
        "and the sample-ratio-mismatch p-value of each cohort (chi-square goodness of fit), counting hashed "
        "assignments only; linked, forced and imported ones are counted on lines of their own."
    )

    def add_arguments(self, parser) -> None:
        experiment_argument(parser, flag=None)
        parser.add_argument(
            "--format", choices=("table", "json"), default="table", help="an aligned table (default) or JSON"
        )

    def handle(self, *args, experiment: str, format: str, **options) -> None:
        found = experiment_named(experiment)
        report = experiment_report(found)
        if format == "json":
            self.stdout.write(json.dumps(report.as_json(), ensure_ascii=False, allow_nan=False, indent=2))
        else:
            for line in self.table_lines(report):
                self.stdout.write(line)

    def table_lines(self, report: ExperimentReport) -> list[str]:
        """A header line, then one row per cohort and variant (the p-value on each cohort's first row),
        then a row per variant and source of the cohort's assignments that were not hashed."""
        rows = []
        for cohort in report.cohorts:
            rows += [
                (
                    str(cohort.number),
                    line.variant_id,
                    str(line.assignments),
                    line.expected_text,
                    line.observed_text,
                    cohort.p_value_text if index == 0 else "",
                )
                for index, line in enumerate(cohort.variants)
            ]
            rows += [
                (str(cohort.number), f"{line.variant_id} ({line.source})", str(line.assignments), "", "", "")
                for line in cohort.other_sources
            ]
        widths = [max(len(cell) for cell in column) for column in zip(TABLE_COLUMNS, *rows, strict=True)]

        def aligned(cells: tuple[str, ...]) -> str:
            return "  ".join(
                cell.rjust(width) if name in RIGHT_ALIGNED else cell.ljust(width)
                for name, cell, width in zip(TABLE_COLUMNS, cells, widths, strict=True)
            ).rstrip()

        header = f"experiment {report.experiment_id} ({report.status}): {report.assignments} assignments"
        return [header, "", aligned(TABLE_COLUMNS), *(aligned(row) for row in rows)]
