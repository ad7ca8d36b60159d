"""What the change feed records when a command changes stored assignments: a replacement
(force_assignments --replace) or a deletion (delete_assignments), in AssignmentChange, in the transaction
that makes it (assignments/data/changes.py).

The changed row leaves the assignments' part of the feed (its change_xid is NULL,
or it is gone), so its `assignment.created` moves to the log in the same
transaction, at its position and as it was: a copy that has not read it yet reads
it there, before the change that follows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.db import connection, transaction
from django.utils import timezone

from assignments.data.changes import floor_mark, horizon_read, last_change_below
from assignments.models import AssignmentChange, ChangeMark, Experiment, Variant
from assignments.storage import StoredRow


def change_xid_current() -> int:
    """The current transaction's place in the feed's order (core/commitorder.py); call inside
    transaction.atomic(). On SQLite it advances the change counter, as every row stored does."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_current_xact_id()::text::bigint")
        else:
            cursor.execute("UPDATE assignments_changeclock SET value = value + 1 RETURNING value")
        return cursor.fetchone()[0]


def deletions_record(*, experiment: Experiment, rows: Sequence[StoredRow]) -> None:
    """Record the deletion of `rows`, as they were; in the transaction that deleted them."""
    if rows:
        _record(experiment=experiment, before=rows, after=rows, rank=AssignmentChange.Rank.DELETED)


def replacements_record(*, experiment: Experiment, before: Sequence[StoredRow], after: Sequence[StoredRow]) -> None:
    """Record the replacement of the rows `before` by `after` (the same rows, in the same order); in the
    transaction that replaced them."""
    if before:
        _record(experiment=experiment, before=before, after=after, rank=AssignmentChange.Rank.REPLACED)


def _record(*, experiment: Experiment, before: Sequence[StoredRow], after: Sequence[StoredRow], rank: int) -> None:
    xid = change_xid_current()
    now = timezone.now()
    variant_keys = dict(Variant.objects.filter(experiment=experiment).values_list("pk", "key"))

    def change(row: StoredRow, *, change_xid: int, rank: int, recorded_at) -> AssignmentChange:
        return AssignmentChange(
            change_xid=change_xid,
            rank=rank,
            assignment_id=row.id,
            recorded_at=recorded_at,
            experiment_key=experiment.key,
            subject_id=row.subject_id,
            variant_key=variant_keys[row.variant_pk],
            cohort=row.cohort,
            created_at=row.created_at,
            source=row.source,
        )

    moved = [
        change(row, change_xid=row.change_xid, rank=AssignmentChange.Rank.CREATED, recorded_at=row.recorded_at)
        for row in before
        if row.change_xid is not None
    ]
    AssignmentChange.objects.bulk_create(
        [*moved, *(change(row, change_xid=xid, rank=rank, recorded_at=now) for row in after)]
    )


PRUNE_BATCH_SIZE = 10_000


def changes_prune(*, batch_size: int = PRUNE_BATCH_SIZE, on_batch: Callable[[int], None] = lambda rows: None) -> int:
    """Mark the feed's horizon now, and drop the changes below the floor (floor_mark) from the log, in
    batches of their own transactions; returns how many were dropped.

    The assignments and links stay: below the floor, the feed no longer serves them.
    The floor mark is kept, marked as pruned below, so that a longer retention set
    later does not serve less than it says; the marks below it are deleted.
    """
    horizon = horizon_read()
    last = last_change_below(horizon)
    ChangeMark.objects.create(
        horizon=horizon,
        last_xid=last and last.xid,
        last_rank=last and last.rank,
        last_row=last and last.row,
    )
    floor = floor_mark()
    if floor is None:
        return 0
    ChangeMark.objects.filter(pk=floor.pk).update(pruned=True)
    ChangeMark.objects.filter(horizon__lte=floor.horizon).exclude(pk=floor.pk).delete()
    dropped = 0
    while True:
        with transaction.atomic():
            ids = list(
                AssignmentChange.objects.filter(change_xid__lt=floor.horizon).values_list("id", flat=True)[:batch_size]
            )
            AssignmentChange.objects.filter(id__in=ids).delete()
        dropped += len(ids)
        on_batch(len(ids))
        if len(ids) < batch_size:
            return dropped
