"""A layer's slots as the staff console draws them: who owns which now, which are free, and who owned them before.

The slots of a layer's active experiments never overlap (layers.py), so at any time each
slot has at most one owner. Experiments that owned slots and are done (a declared winner,
ended, archived) freed them, but the subjects they assigned there may still carry their
effects: an experiment that takes those slots over inherits a population that saw another
treatment, which is worth knowing before reading its results. Drafts own nothing yet and
may overlap an active experiment (starting one is then refused).

`slot_map` is a pure function of the experiments' statuses and ranges; `layer_slot_map`
reads them in one query.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from assignments.console.population_text import percent_text, slot_range_text
from assignments.models import Experiment, Layer
from assignments.slots import SLOTS, Ranges, overlap, ranges_from

DONE_STATUSES = (Experiment.Status.WINNER_DECLARED, Experiment.Status.ENDED, Experiment.Status.ARCHIVED)


@dataclass(frozen=True)
class Owner:
    """An experiment of the layer and the slot ranges it owns (or owned), in ascending order."""

    pk: int
    key: str
    status: str
    ranges: Ranges

    @property
    def slots(self) -> int:
        return sum(end - start for start, end in self.ranges)

    @property
    def ranges_text(self) -> str:
        return ", ".join(slot_range_text(start, end) for start, end in self.ranges)


@dataclass(frozen=True)
class Segment:
    """A run of slots [start, end) with one owner now (None: free) and the same done experiments before."""

    start: int
    end: int
    owner: Owner | None
    before: tuple[Owner, ...]

    @property
    def slots(self) -> int:
        return self.end - self.start

    @property
    def share(self) -> float:
        return self.slots / SLOTS

    @property
    def range_text(self) -> str:
        return slot_range_text(self.start, self.end)

    @property
    def share_text(self) -> str:
        return percent_text(self.share)


@dataclass(frozen=True)
class DraftOverlap:
    """A draft's slots that an active experiment owns: starting the draft is refused until they are freed."""

    draft: Owner
    active: Owner
    start: int
    end: int

    @property
    def range_text(self) -> str:
        return slot_range_text(self.start, self.end)


@dataclass(frozen=True)
class SlotMap:
    # Every slot from 0 to SLOTS - 1 once, in order.
    segments: tuple[Segment, ...]
    active: tuple[Owner, ...]
    done: tuple[Owner, ...]
    drafts: tuple[Owner, ...]
    overlaps: tuple[DraftOverlap, ...]

    @property
    def free(self) -> int:
        return sum(segment.slots for segment in self.segments if segment.owner is None)

    @property
    def owned(self) -> int:
        return SLOTS - self.free

    @property
    def draft_lines(self) -> list[tuple[Owner, list[DraftOverlap]]]:
        """Each draft, with the active experiments' slots that stop it from starting."""
        return [(draft, [clash for clash in self.overlaps if clash.draft == draft]) for draft in self.drafts]

    @property
    def owners(self) -> tuple[Owner, ...]:
        """Every experiment of the layer: the active ones, then those done, then the drafts."""
        return self.active + self.done + self.drafts


def _covering(owners: Sequence[Owner], start: int, end: int) -> tuple[Owner, ...]:
    return tuple(owner for owner in owners if overlap(owner.ranges, ((start, end),)) is not None)


def slot_map(experiments: Iterable[Owner]) -> SlotMap:
    """The map of a layer's slots from its experiments (any order; each with its ranges)."""
    experiments = sorted(experiments, key=lambda owner: owner.key.lower())
    active = tuple(owner for owner in experiments if owner.status == Experiment.Status.ACTIVE)
    done = tuple(owner for owner in experiments if owner.status in DONE_STATUSES)
    drafts = tuple(owner for owner in experiments if owner.status == Experiment.Status.DRAFT)
    bounds = sorted({0, SLOTS} | {bound for owner in active + done for pair in owner.ranges for bound in pair})
    runs = [
        (start, end, next(iter(_covering(active, start, end)), None), _covering(done, start, end))
        for start, end in itertools.pairwise(bounds)
    ]
    segments = []
    # Runs that differ only by a bound of a range elsewhere in the layer read as one.
    for (owner, before), group in itertools.groupby(runs, key=lambda run: (run[2], run[3])):
        merged = list(group)
        segments.append(Segment(start=merged[0][0], end=merged[-1][1], owner=owner, before=before))
    overlaps = []
    for draft, owner in itertools.product(drafts, active):
        found = overlap(draft.ranges, owner.ranges)
        if found is not None:
            overlaps.append(DraftOverlap(draft=draft, active=owner, start=found[0], end=found[1]))
    return SlotMap(segments=tuple(segments), active=active, done=done, drafts=drafts, overlaps=tuple(overlaps))


def layer_slot_map(layer: Layer) -> SlotMap:
    """The map of the layer's slots, read in one query."""
    rows = Experiment.objects.filter(layer=layer).values_list("pk", "key", "status", "slots")
    return slot_map(
        Owner(pk=pk, key=key, status=status, ranges=tuple(sorted(ranges_from(slots))))
        for pk, key, status, slots in rows
    )
