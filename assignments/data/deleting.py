"""Clean-up of a finished experiment's assignments (delete_assignments), in batches.

Each batch is its own transaction: a table of millions of rows is never locked
for the whole deletion, the database's undo stays small, and a deletion that
stops half way is finished by running it again. Each records its deletions for
the change feed in the same transaction (assignments/data/change_log.py).
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from assignments.data.change_log import deletions_record
from assignments.models import Experiment
from assignments.storage import assignments_delete_batch

DELETABLE_STATUSES = (Experiment.Status.ENDED, Experiment.Status.ARCHIVED)
BATCH_SIZE = 10_000


class DeleteRefused(Exception):
    """Nothing was deleted: the message says why."""


def delete_check(*, experiment: Experiment) -> None:
    """Raise DeleteRefused unless the experiment is ended or archived (which it stays: the lifecycle runs forward)."""
    experiment.refresh_from_db(fields=["status"])
    if experiment.status not in DELETABLE_STATUSES:
        raise DeleteRefused(
            f"experiment {experiment.key!r} is {experiment.status}; only the assignments of an ended or archived "
            "experiment can be deleted"
        )


def assignments_delete(
    *, experiment: Experiment, batch_size: int = BATCH_SIZE, on_batch: Callable[[int], None] = lambda rows: None
) -> int:
    """Delete every assignment of an ended or archived experiment; returns how many were deleted."""
    delete_check(experiment=experiment)
    deleted = 0
    while True:
        with transaction.atomic():
            rows = assignments_delete_batch(experiment_pk=experiment.pk, limit=batch_size)
            deletions_record(experiment=experiment, rows=rows)
        deleted += len(rows)
        on_batch(len(rows))
        if len(rows) < batch_size:
            return deleted
