"""The assignments of one experiment as export rows (export_assignments)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from assignments.models import Assignment, Experiment, Variant
from assignments.storage_citus import assignments_distributed
from core.exports import CHUNK_SIZE, time_ordered, timestamp_format

ASSIGNMENT_COLUMNS = ("experiment_id", "subject_id", "variant_id", "cohort", "created_at", "source")


def assignment_rows(
    *, experiment: Experiment, since: dt.datetime | None = None, chunk_size: int = CHUNK_SIZE
) -> Iterator[tuple[str, str, str, int, str, str]]:
    """The experiment's assignments as export rows, in (created_at, id) order, fetched chunk by chunk.

    Ordered by created_at through the index assignment_experiment_created; id
    breaks the ties of a batch stored with one timestamp, so the order is stable.
    Call inside streaming_read().
    """
    rows = time_ordered(
        Assignment.objects.filter(experiment=experiment),
        ("subject_id", "variant_id", "cohort", "created_at", "source"),
        since=since,
        chunk_size=chunk_size,
        paged=assignments_distributed(),
    )
    variant_keys = _variant_keys(experiment)
    for subject_id, variant_pk, cohort, created_at, source in rows:
        if variant_pk not in variant_keys:
            # Added by an apply after the map was read; variants with assignments
            # are never deleted (PROTECT), so a fresh read has it.
            variant_keys = _variant_keys(experiment)
        yield experiment.key, subject_id, variant_keys[variant_pk], cohort, timestamp_format(created_at), source


def _variant_keys(experiment: Experiment) -> dict[int, str]:
    return dict(Variant.objects.filter(experiment=experiment).values_list("pk", "key"))
