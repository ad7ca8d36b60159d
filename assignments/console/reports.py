"""The numbers behind experiment_report and the admin's health panel: one function feeds both.

Counts come from AssignmentCount, which triggers keep exact as assignments are
written, so an experiment with tens of millions of assignments is summed from a
few hundred rows instead of counted row by row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

from django.db.models import Sum

from assignments.console.statistics import SampleRatioTest, sample_ratio_test
from assignments.models import Assignment, AssignmentCount, Cohort, Experiment, Variant

# Below this p-value a cohort's split is flagged as a sample-ratio mismatch.
SRM_ALERT_P_VALUE = 0.001


def share_text(share: float | None) -> str:
    return "n/a" if share is None else f"{share * 100:.2f}%"


def p_value_text(test: SampleRatioTest | None) -> str:
    if test is None:
        return "n/a"
    if test.p_value == 0 or test.p_value >= 0.0001:
        return f"{test.p_value:.4f}"
    return f"{test.p_value:.2e}"


@dataclass(frozen=True)
class VariantLine:
    variant_id: str
    assignments: int
    # None when the cohort has no splits record to say what was expected.
    expected_share: float | None
    # None when the cohort has no assignments.
    observed_share: float | None

    @property
    def expected_text(self) -> str:
        return share_text(self.expected_share)

    @property
    def observed_text(self) -> str:
        return share_text(self.observed_share)


@dataclass(frozen=True)
class SourceLine:
    """Assignments of one variant that were not randomised (linked, forced or imported): counted apart."""

    variant_id: str
    source: str
    assignments: int


@dataclass(frozen=True)
class CohortLine:
    number: int
    # Hashed assignments only: the randomised ones, which the shares and the test are about.
    assignments: int
    variants: list[VariantLine]
    # None when the cohort has no assignments, or no splits record to test them against.
    test: SampleRatioTest | None
    other_sources: list[SourceLine]

    @property
    def p_value_text(self) -> str:
        return p_value_text(self.test)

    @property
    def mismatch(self) -> bool:
        return self.test is not None and self.test.p_value < SRM_ALERT_P_VALUE

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
            "other_sources": [
                {"variant_id": line.variant_id, "source": line.source, "assignments": line.assignments}
                for line in self.other_sources
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
    number: int,
    splits: list[dict] | None,
    counts: dict[str, int],
    current_keys: dict[str, str],
    other_sources: list[SourceLine],
) -> CohortLine:
    """One cohort's lines: its recorded variants in configuration order, then any others it has assignments for.

    `counts` are the hashed assignments by lower-cased variant ID. Variants match
    case-insensitively (resource IDs do); each shows by its current ID, or by the
    recorded one if it has since been removed.
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
    return CohortLine(number=number, assignments=total, variants=variants, test=test, other_sources=other_sources)


def experiment_report(experiment: Experiment) -> ExperimentReport:
    """Per cohort and variant: hashed assignments, expected and observed shares, and each cohort's SRM test;
    the assignments of the other sources on lines of their own."""
    grouped = (
        AssignmentCount.objects.filter(experiment=experiment)
        .values_list("cohort", "variant_id", "source")
        .annotate(count=Sum("assignments"))
        .order_by("cohort", "source", "variant_id")
    )
    current_keys_by_pk = dict(Variant.objects.filter(experiment=experiment).values_list("pk", "key"))
    counts: dict[int, dict[str, int]] = {}
    others: dict[int, list[SourceLine]] = {}
    for cohort, variant_pk, source, count in grouped:
        if not count:
            continue
        if source == Assignment.Source.HASHED:
            counts.setdefault(cohort, {})[current_keys_by_pk[variant_pk].lower()] = count
        else:
            others.setdefault(cohort, []).append(SourceLine(current_keys_by_pk[variant_pk], source, count))
    splits_by_cohort = dict(Cohort.objects.filter(experiment=experiment).values_list("number", "splits"))
    current_keys = {key.lower(): key for key in current_keys_by_pk.values()}
    cohorts = [
        _cohort_line(number, splits_by_cohort.get(number), counts.get(number, {}), current_keys, others.get(number, []))
        for number in sorted(splits_by_cohort.keys() | counts.keys() | others.keys())
    ]
    return ExperimentReport(
        experiment_id=experiment.key,
        status=experiment.status,
        assignments=sum(
            cohort.assignments + sum(line.assignments for line in cohort.other_sources) for cohort in cohorts
        ),
        cohorts=cohorts,
    )


def experiment_assignments_total(experiment: Experiment) -> int:
    """How many assignments the experiment has, of every source, from the kept counts (no scan of the assignments)."""
    return AssignmentCount.objects.filter(experiment=experiment).aggregate(total=Sum("assignments"))["total"] or 0


@dataclass(frozen=True)
class DailySeries:
    """New assignments (of every source) per UTC day and variant, every day from the first to the last with any."""

    days: list[date]
    # Variant ID -> one count per day, variants in configuration order.
    counts: dict[str, list[int]]


def experiment_daily(experiment: Experiment) -> DailySeries:
    rows = (
        AssignmentCount.objects.filter(experiment=experiment)
        .values_list("day", "variant_id")
        .annotate(count=Sum("assignments"))
        .order_by()
    )
    variants = list(Variant.objects.filter(experiment=experiment).order_by("position").values_list("pk", "key"))
    by_day: dict[date, dict[int, int]] = {}
    for day, variant_pk, count in rows:
        if count:
            by_day.setdefault(day, {})[variant_pk] = count
    if not by_day:
        return DailySeries(days=[], counts={key: [] for _, key in variants})
    first, last = min(by_day), max(by_day)
    days = [date.fromordinal(ordinal) for ordinal in range(first.toordinal(), last.toordinal() + 1)]
    return DailySeries(
        days=days, counts={key: [by_day.get(day, {}).get(pk, 0) for day in days] for pk, key in variants}
    )
