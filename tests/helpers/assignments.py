"""The assignment formula and the slot draw written independently, assignments stored as another process
would have, new rows as the service inserts them and the counts its triggers keep."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from assignments.models import Assignment, AssignmentCount, Experiment


def reference_variant(salt: str, subject_id: str, splits: Sequence[tuple[str, float]]) -> str:
    """The assignment formula (docs/explanation/assignment.md) in plain integers, sharing no code with
    assignments/hashing.py.

    With u = n / 2**64 and each split an exact binary fraction p / q (q a power of
    two), "cumulative > u" is "cumulative_numerator * 2**64 > n * denominator".
    """
    n = int.from_bytes(hashlib.sha256((salt + ":" + subject_id).encode("utf-8")).digest()[:8], "big")
    ratios = [split.as_integer_ratio() for _, split in splits]
    denominator = max(q for _, q in ratios)
    cumulative = 0
    for (variant, _), (p, q) in zip(splits, ratios, strict=True):
        cumulative += p * (denominator // q)
        if cumulative * 2**64 > n * denominator:
            return variant
    return [variant for variant, split in splits if split > 0][-1]


def reference_slot(salt: str, subject_id: str) -> int:
    """The slot draw written independently: bytes 0 to 7 of the digest, times 10000, over 2**64, floored."""
    digest = hashlib.sha256((salt + ":" + subject_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") * 10000 // 2**64


def assigned_store(
    experiment_key: str,
    subject_id: str,
    variant: str,
    *,
    source: str = Assignment.Source.HASHED,
    created_at: datetime | None = None,
) -> None:
    """An assignment of cohort 1 stored directly, as an earlier request (hashed, now, unless told) would have."""
    experiment = Experiment.objects.get(key=experiment_key)
    Assignment.objects.create(
        experiment=experiment,
        subject_id=subject_id,
        variant=experiment.variants.get(key=variant),
        cohort=1,
        source=source,
        created_at=created_at or timezone.now(),
    )


def assignments_bulk_store(
    experiment: Experiment,
    count: int,
    *,
    prefix: str = "s",
    cohort: int = 1,
    sources: Sequence[str] = (Assignment.Source.HASHED,),
    start: datetime | None = None,
) -> None:
    """`count` assignments of the experiment in one statement, subject IDs `prefix` and a six-digit index, cycling
    through its variants in their order and through `sources`; a second apart from `start`, or all made now."""
    variants = list(experiment.variants.order_by("position"))
    now = timezone.now()
    Assignment.objects.bulk_create(
        Assignment(
            experiment=experiment,
            subject_id=f"{prefix}{index:06d}",
            variant=variants[index % len(variants)],
            cohort=cohort,
            source=sources[index % len(sources)],
            created_at=now if start is None else start + timedelta(seconds=index),
        )
        for index in range(count)
    )


def variant_counts_store(
    experiment: Experiment, counts: dict[str, int], *, source: str = Assignment.Source.HASHED, cohort: int = 1
) -> None:
    """counts[variant ID] assignments of the experiment from `source` in `cohort`, stored in one statement (a
    forced one with its reason)."""
    variants = {variant.key: variant for variant in experiment.variants.all()}
    Assignment.objects.bulk_create(
        Assignment(
            experiment=experiment,
            subject_id=f"{source}-{key}-{cohort}-{index}",
            variant=variants[key],
            cohort=cohort,
            source=source,
            reason="QA" if source == Assignment.Source.FORCED else "",
        )
        for key, count in counts.items()
        for index in range(count)
    )


def new_rows(prefix: str, count: int) -> tuple[list[tuple], object]:
    """`count` new (experiment pk, subject ID, variant pk, cohort, source) rows of checkout-button, and a time
    for them as the service adapts it."""
    experiment = Experiment.objects.get(key="checkout-button")
    variant = experiment.variants.first()
    rows = [(experiment.pk, f"{prefix}-{n:04d}", variant.pk, 1, "hashed") for n in range(count)]
    return rows, connection.ops.adapt_datetimefield_value(timezone.now())


def assignments_counted(experiment_pk: int) -> int:
    """The assignments of an experiment as the triggers counted them (assignments_assignmentcount)."""
    return AssignmentCount.objects.filter(experiment_id=experiment_pk).aggregate(total=Sum("assignments"))["total"]
