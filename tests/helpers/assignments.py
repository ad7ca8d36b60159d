"""The assignment formula and the slot draw written independently, and assignments stored as another process
would have."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from django.utils import timezone

from assignments.models import Assignment, Experiment


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


def assigned_store(experiment_key: str, subject_id: str, variant: str) -> None:
    """A hashed assignment of cohort 1 stored directly, as an earlier request would have."""
    experiment = Experiment.objects.get(key=experiment_key)
    Assignment.objects.create(
        experiment=experiment,
        subject_id=subject_id,
        variant=experiment.variants.get(key=variant),
        cohort=1,
        source=Assignment.Source.HASHED,
        created_at=timezone.now(),
    )
