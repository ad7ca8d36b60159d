"""The assignment endpoints' counters, on the service's one registry (core/observability/metrics.py)."""

from __future__ import annotations

from django.conf import settings
from prometheus_client import Counter

from core.observability.metrics import REGISTRY

ASSIGNMENTS_CREATED = Counter(
    "assignments_created_total",
    "Assignments stored by the assignment endpoints, by experiment and source (hashed or linked); a holdout's "
    "memberships count under the holdout's ID, as hashed.",
    ["experiment", "source"],
    registry=REGISTRY,
)
ASSIGNMENT_CONFLICTS_LOST = Counter(
    "assignment_conflicts_lost_total",
    "New assignments a concurrent request stored first (skipped by the insert, read back from the winner), "
    "by experiment.",
    ["experiment"],
    registry=REGISTRY,
)
LINK_WALKS_BOUNDED = Counter(
    "assignment_link_walks_bounded_total",
    "New subjects of experiments that follow links whose walk was stopped by a bound on a request's work "
    "(link rows read or neighbours visited), so the formula decided their variant, by experiment.",
    ["experiment"],
    registry=REGISTRY,
)

SUBJECTS_EXCLUDED = Counter(
    "assignment_subjects_excluded_total",
    "Subjects without a stored assignment that a gate kept out of an experiment (answered with the control, "
    "nothing stored), by experiment and reason; a declared winner's holdouts and targeting count too.",
    ["experiment", "reason"],
    registry=REGISTRY,
)


def assignments_created(*, experiment: str, source: str, count: int) -> None:
    if settings.METRICS_ENABLED:
        ASSIGNMENTS_CREATED.labels(experiment, source).inc(count)


def assignment_conflicts_lost(*, experiment: str, count: int) -> None:
    if settings.METRICS_ENABLED:
        ASSIGNMENT_CONFLICTS_LOST.labels(experiment).inc(count)


def link_walks_bounded(*, experiment: str, count: int) -> None:
    if settings.METRICS_ENABLED:
        LINK_WALKS_BOUNDED.labels(experiment).inc(count)


def subjects_excluded(*, experiment: str, reason: str, count: int) -> None:
    if settings.METRICS_ENABLED:
        SUBJECTS_EXCLUDED.labels(experiment, reason).inc(count)
