"""The change feed (GET /changes, export_changes): every change to stored assignments and links, in an order
that a copy kept elsewhere follows from a cursor without missing or repeating one
(docs/explanation/change-feed.md).

A change's position is (transaction ID, rank, row ID) (core/commitorder.py). Three
tables hold the changes, each read in that order through an index:

- the assignments themselves: each row is its own `assignment.created` until it
  is replaced or deleted;
- the links, each its own `link.created`;
- AssignmentChange: replacements and deletions, and the `assignment.created`
  of each row they changed, moved there at its position as it was.

A page reads the horizon first, then each table up to the page's size: the
assignments before the log, so that a row moved to the log between the two reads
is read twice at one position, never missed, and kept once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from assignments.errors import CursorExpired
from assignments.models import AssignmentChange, ChangeMark
from assignments.storage import stored_moment
from assignments.storage_citus import assignments_distributed
from core.citus import workers_prepared_settled
from core.commitorder import POSTGRES_HORIZON, Position, after_filter
from core.exports import timestamp_format
from idlinks.selectors import subject_type_keys
from idlinks.storage import LINK_RANK, link_changes, link_last_below

LIMIT_DEFAULT = 1000
LIMIT_MAX = 10_000
ASSIGNMENT_RANK = AssignmentChange.Rank.CREATED
KINDS = {
    AssignmentChange.Rank.CREATED: "assignment.created",
    LINK_RANK: "link.created",
    AssignmentChange.Rank.REPLACED: "assignment.replaced",
    AssignmentChange.Rank.DELETED: "assignment.deleted",
}
# How long a page waits for a transaction that Citus committed on the coordinator to be committed on its
# workers too (core.citus.workers_prepared_settled); that is normally a few milliseconds.
PREPARED_WAIT_SECONDS = 2.0
# SQLite's changes are all below this: one writer at a time, so whatever is committed is final.
SQLITE_HORIZON = "SELECT value + 1 FROM assignments_changeclock"

ASSIGNMENT_CHANGES = """
SELECT a.change_xid, a.id, a.recorded_at, e.key, a.subject_id, v.key, a.cohort, a.created_at, a.source
FROM assignments_assignment a
JOIN assignments_experiment e ON e.id = a.experiment_id
JOIN assignments_variant v ON v.id = a.variant_id
WHERE a.change_xid IS NOT NULL AND {after} AND a.change_xid < %s
ORDER BY a.change_xid, a.id LIMIT %s
"""
LOGGED_CHANGES = """
SELECT change_xid, rank, assignment_id, recorded_at, experiment_key, subject_id, variant_key, cohort, created_at,
       source
FROM assignments_assignmentchange
WHERE (change_xid, rank, assignment_id) > (%s, %s, %s) AND change_xid < %s
ORDER BY change_xid, rank, assignment_id LIMIT %s
"""


@dataclass(frozen=True)
class Change:
    position: Position
    recorded_at: dt.datetime
    # The assignment (experiment_id, subject_id, variant_id, cohort, created_at, source), or the link
    # (subject_type_a, subject_id_a, subject_type_b, subject_id_b, created_at), as the API names them.
    record: dict[str, Any]

    @property
    def kind(self) -> str:
        return KINDS[self.position.rank]

    def as_json(self) -> dict[str, Any]:
        member = "link" if self.position.rank == LINK_RANK else "assignment"
        return {
            "cursor": self.position.cursor(),
            "kind": self.kind,
            "recorded_at": timestamp_format(self.recorded_at),
            member: self.record,
        }


@dataclass(frozen=True)
class Page:
    changes: list[Change]
    next: Position


def changes_page(*, after: Position | None, limit: int = LIMIT_DEFAULT) -> Page:
    """The first `limit` changes after `after` (from the oldest kept without it) that can be served now.

    Raises CursorExpired when changes after `after` were dropped (change_retention).
    """
    retention = change_retention()
    if after is not None and retention.dropped is not None and after < retention.dropped:
        raise CursorExpired(
            "changes after this cursor are older than the changes kept (CHANGES_RETENTION_DAYS) and were dropped: "
            "start again from a full export (export_assignments, export_id_links) and follow the feed from a new "
            "cursor"
        )
    start = after or retention.floor
    horizon = change_horizon()
    if horizon is None:
        return Page([], start)
    found: dict[Position, Change] = {}
    for change in (
        *_assignment_changes(start, horizon, limit),
        *_link_changes(start, horizon, limit),
        *_logged_changes(start, horizon, limit),
    ):
        found.setdefault(change.position, change)
    changes = [found[position] for position in sorted(found)[:limit]]
    if changes:
        return Page(changes, changes[-1].position)
    # With no cursor, every change below the horizon has been read: none was there.
    return Page([], start if after is not None else max(start, Position.before(horizon)))


def change_horizon() -> int | None:
    """The transaction ID below which every change is committed and visible, or None when none can be
    served now (core/commitorder.py)."""
    horizon = horizon_read()
    if assignments_distributed() and not workers_prepared_settled(timeout=PREPARED_WAIT_SECONDS):
        return None
    return horizon


def horizon_read() -> int:
    """The horizon as the database has it now: on Citus, the coordinator's."""
    with connection.cursor() as cursor:
        cursor.execute(POSTGRES_HORIZON if connection.vendor == "postgresql" else SQLITE_HORIZON)
        return cursor.fetchone()[0]


@dataclass(frozen=True)
class Retention:
    # Where the feed starts without a cursor: after every change it no longer serves.
    floor: Position
    # The last change it no longer serves (None: it serves all): a cursor before it has missed changes.
    dropped: Position | None


def floor_mark() -> ChangeMark | None:
    """The mark below whose horizon the feed serves nothing: the newest older than CHANGES_RETENTION_DAYS or,
    if newer, the newest that prune_changes has dropped changes below."""
    cutoff = timezone.now() - dt.timedelta(days=settings.CHANGES_RETENTION_DAYS)
    return (
        ChangeMark.objects.filter(Q(observed_at__lt=cutoff) | Q(pruned=True))
        .order_by("-horizon", "-observed_at")
        .first()
    )


def change_retention() -> Retention:
    """What the feed still serves: the changes above the floor mark."""
    mark = floor_mark()
    if mark is None:
        return Retention(Position.before(0), None)
    dropped = None if mark.last_xid is None else Position(mark.last_xid, mark.last_rank, mark.last_row)
    return Retention(Position.before(mark.horizon), dropped)


LAST_ASSIGNMENT = """
SELECT change_xid, 0, id FROM assignments_assignment WHERE change_xid IS NOT NULL AND change_xid < %s
ORDER BY change_xid DESC, id DESC LIMIT 1
"""
LAST_LOGGED = """
SELECT change_xid, rank, assignment_id FROM assignments_assignmentchange WHERE change_xid < %s
ORDER BY change_xid DESC, rank DESC, assignment_id DESC LIMIT 1
"""


def last_change_below(horizon: int) -> Position | None:
    """The last change of the transactions below `horizon`, or None if they made none. It stays the last:
    those transactions have ended, and a change moved to the log keeps its position."""
    found = []
    with connection.cursor() as cursor:
        for sql in (LAST_ASSIGNMENT, LAST_LOGGED):
            cursor.execute(sql, [horizon])
            found += [Position(*row) for row in cursor.fetchall()]
    found += [Position(xid, LINK_RANK, row) for xid, row in link_last_below(horizon)]
    return max(found, default=None)


def _assignment(experiment_id, subject_id, variant_id, cohort, created_at, source) -> dict[str, Any]:
    return {
        "experiment_id": experiment_id,
        "subject_id": subject_id,
        "variant_id": variant_id,
        "cohort": cohort,
        "created_at": timestamp_format(stored_moment(created_at)),
        "source": source,
    }


def _assignment_changes(start: Position, horizon: int, limit: int) -> list[Change]:
    condition, params = after_filter(rank=ASSIGNMENT_RANK, position=start, xid_column="a.change_xid", row_column="a.id")
    with connection.cursor() as cursor:
        cursor.execute(ASSIGNMENT_CHANGES.format(after=condition), [*params, horizon, limit])
        return [
            Change(Position(xid, ASSIGNMENT_RANK, row), stored_moment(recorded_at), _assignment(*record))
            for xid, row, recorded_at, *record in cursor.fetchall()
        ]


def _link_changes(start: Position, horizon: int, limit: int) -> list[Change]:
    rows = link_changes(after=start, horizon=horizon, limit=limit)
    type_keys = subject_type_keys()
    return [
        Change(
            Position(xid, LINK_RANK, row),
            stored_moment(recorded_at),
            {
                "subject_type_a": type_keys[type_a],
                "subject_id_a": subject_a,
                "subject_type_b": type_keys[type_b],
                "subject_id_b": subject_b,
                "created_at": timestamp_format(stored_moment(created_at)),
            },
        )
        for xid, row, recorded_at, type_a, subject_a, type_b, subject_b, created_at in rows
    ]


def _logged_changes(start: Position, horizon: int, limit: int) -> list[Change]:
    with connection.cursor() as cursor:
        cursor.execute(LOGGED_CHANGES, [start.xid, start.rank, start.row, horizon, limit])
        return [
            Change(Position(xid, rank, row), stored_moment(recorded_at), _assignment(*record))
            for xid, rank, row, recorded_at, *record in cursor.fetchall()
        ]
