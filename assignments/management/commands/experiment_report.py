from __future__ import annotations

import json
import math
from dataclasses import dataclass

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count

from assignments.models import Assignment, Cohort, Experiment, Variant
from assignments.selectors import experiment_get_ci
from assignments.statistics import SampleRatioTest, sample_ratio_test

TABLE_COLUMNS = ("cohort", "variant", "assignments", "expected", "observed", "srm p-value")
RIGHT_ALIGNED = {"cohort", "assignments", "expected", "observed", "srm p-value"}


@dataclass(frozen=True)
class VariantLine:
    variant_id: str
    assignments: int
    # None when the cohort has no splits record to say what was expected.
    expected_share: float | None
    # None when the cohort has no assignments.
    observed_share: float | None


@dataclass(frozen=True)
class CohortLine:
    number: int
    assignments: int
    variants: list[VariantLine]
    # None when the cohort has no assignments, or no splits record to test them against.
    test: SampleRatioTest | None

    def as_json(self) -> dict:
        test = self.test
        return {
            "cohort": self.number,
            "assignments": self.assignments,
            "srm_p_value": test.p_value if test else None,
            # Infinite when a variant expected to get nobody got someone; JSON has no infinity.
            "chi_square": test.statistic if test and math.isfinite(test.statistic) else None,
            "degrees_of_freedom": test.degrees_of_freedom if test else None,
            "variants": [
                {
                    "variant_id": line.variant_id,
                    "assignments": line.assignments,
                    "expected_share": line.expected_share,
                    "observed_share": line.observed_share,
                }
                for line in self.variants
            ],
        }


@dataclass(frozen=True)
class ExperimentReport:
    experiment_id: str
    status: str
    assignments: int
    cohorts: list[CohortLine]

    def as_json(self) -> dict:
        return {
            "experiment_id": self.experiment_id,
            "status": self.status,
            "assignments": self.assignments,
            "cohorts": [cohort.as_json() for cohort in self.cohorts],
        }


def _cohort_line(
    number: int, splits: list[dict] | None, counts: dict[str, int], current_keys: dict[str, str]
) -> CohortLine:
    """One cohort's lines: its recorded variants in configuration order, then any others it has assignments for.

    Variants match case-insensitively (resource IDs do); each shows by its current
    ID, or by the recorded one if it has since been removed.
    """
    total = sum(counts.values())
    recorded = [(entry["variant"], float(entry["split"])) for entry in splits or []]
    recorded_lower = {key.lower() for key, _ in recorded}
    unrecorded_share = 0.0 if splits is not None else None
    shares: list[tuple[str, float | None]] = [
        *recorded,
        *((key, unrecorded_share) for key in sorted(counts) if key not in recorded_lower),
    ]
    variants = [
        VariantLine(
            variant_id=current_keys.get(key.lower(), key),
            assignments=counts.get(key.lower(), 0),
            expected_share=share,
            observed_share=counts.get(key.lower(), 0) / total if total else None,
        )
        for key, share in shares
    ]
    test = None
    if splits is not None:
        test = sample_ratio_test(
            observed=[line.assignments for line in variants],
            expected_shares=[line.expected_share or 0.0 for line in variants],
        )
    return CohortLine(number=number, assignments=total, variants=variants, test=test)


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{share * 100:.2f}%"


def _p_value(test: SampleRatioTest | None) -> str:
    if test is None:
        return "n/a"
    if test.p_value == 0 or test.p_value >= 0.0001:
        return f"{test.p_value:.4f}"
    return f"{test.p_value:.2e}"


class Command(BaseCommand):
    help = (
        "Per cohort and variant of an experiment: assignments, expected and observed share, "
        "and the sample-ratio-mismatch p-value of each cohort (chi-square goodness of fit)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("experiment", metavar="ID", help="experiment ID (any case)")
        parser.add_argument(
            "--format", choices=("table", "json"), default="table", help="an aligned table (default) or JSON"
        )

    def handle(self, *args, experiment: str, format: str, **options) -> None:
        found = experiment_get_ci(experiment_id=experiment)
        if found is None:
            raise CommandError(f"no experiment has the ID {experiment!r}")
        report = self.report_build(found)
        if format == "json":
            self.stdout.write(json.dumps(report.as_json(), ensure_ascii=False, allow_nan=False, indent=2))
        else:
            for line in self.table_lines(report):
                self.stdout.write(line)

    def report_build(self, experiment: Experiment) -> ExperimentReport:
        """The report from three queries: cohorts, variants, and one GROUP BY over the assignments."""
        # One pass over the experiment's assignments; it groups by the variant's
        # primary key, so the variants table is not joined row by row.
        grouped = (
            Assignment.objects.filter(experiment=experiment)
            .values_list("cohort", "variant_id")
            .annotate(count=Count("*"))
            .order_by()
        )
        current_keys_by_pk = dict(Variant.objects.filter(experiment=experiment).values_list("pk", "key"))
        counts: dict[int, dict[str, int]] = {}
        for cohort, variant_pk, count in grouped:
            counts.setdefault(cohort, {})[current_keys_by_pk[variant_pk].lower()] = count
        splits_by_cohort = dict(Cohort.objects.filter(experiment=experiment).values_list("number", "splits"))
        current_keys = {key.lower(): key for key in current_keys_by_pk.values()}
        cohorts = [
            _cohort_line(number, splits_by_cohort.get(number), counts.get(number, {}), current_keys)
            for number in sorted(splits_by_cohort.keys() | counts.keys())
        ]
        return ExperimentReport(
            experiment_id=experiment.key,
            status=experiment.status,
            assignments=sum(cohort.assignments for cohort in cohorts),
            cohorts=cohorts,
        )

    def table_lines(self, report: ExperimentReport) -> list[str]:
        """A header line, then one row per cohort and variant; the p-value on each cohort's first row."""
        rows = [
            (
                str(cohort.number),
                line.variant_id,
                str(line.assignments),
                _percent(line.expected_share),
                _percent(line.observed_share),
                _p_value(cohort.test) if index == 0 else "",
            )
            for cohort in report.cohorts
            for index, line in enumerate(cohort.variants)
        ]
        widths = [max(len(cell) for cell in column) for column in zip(TABLE_COLUMNS, *rows, strict=True)]

        def aligned(cells: tuple[str, ...]) -> str:
            return "  ".join(
                cell.rjust(width) if name in RIGHT_ALIGNED else cell.ljust(width)
                for name, cell, width in zip(TABLE_COLUMNS, cells, widths, strict=True)
            ).rstrip()

        header = f"experiment {report.experiment_id} ({report.status}): {report.assignments} assignments"
        return [header, "", aligned(TABLE_COLUMNS), *(aligned(row) for row in rows)]
