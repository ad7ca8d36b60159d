"""Reads that more than one caller needs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db.models.functions import Lower

from assignments.hashing import Allocation
from assignments.models import Cohort, Experiment, Variant

MAX_CACHED_EXPERIMENTS = 10_000


@dataclass(frozen=True)
class ExperimentState:
    """What the hot path needs to answer for one experiment, loaded in one go and cached."""

    pk: int
    key: str
    status: str
    salt: str
    cohort: int
    allocation: Allocation[int]
    winning_variant_pk: int | None
    variant_keys: dict[int, str]

    def variant_pk_for(self, subject_id: str) -> int:
        return self.allocation.variant_for(self.salt, subject_id)


def experiment_get_ci(*, experiment_id: str) -> Experiment | None:
    return Experiment.objects.alias(lkey=Lower("key")).filter(lkey=experiment_id.lower()).first()


def experiment_state_load(*, experiment_id: str) -> ExperimentState | None:
    """The experiment's current state from the database (three small queries)."""
    experiment = experiment_get_ci(experiment_id=experiment_id)
    if experiment is None:
        return None
    variants = list(
        Variant.objects.filter(experiment=experiment).order_by("position").values_list("pk", "key", "split")
    )
    cohort = Cohort.objects.filter(experiment=experiment).order_by("-number").values_list("number", flat=True).first()
    return ExperimentState(
        pk=experiment.pk,
        key=experiment.key,
        status=experiment.status,
        salt=experiment.salt,
        cohort=cohort or 1,
        allocation=Allocation([(pk, split) for pk, _, split in variants]),
        winning_variant_pk=experiment.winning_variant_id,
        variant_keys={pk: key for pk, key, _ in variants},
    )


class ExperimentStateCache:
    """Per-process cache of ExperimentState, unknown experiments included.

    Entries live ASSIGNMENT_CONFIG_CACHE_SECONDS, so a change applied by any
    process is seen everywhere within that time; `clear` makes a change applied
    in this process visible at once.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, ExperimentState | None]] = {}
        self._lock = threading.Lock()

    def get(self, experiment_id: str, *, fresh: bool = False) -> ExperimentState | None:
        cache_key = experiment_id.lower()
        now = time.monotonic()
        if not fresh:
            entry = self._entries.get(cache_key)
            if entry is not None and entry[0] > now:
                return entry[1]
        state = experiment_state_load(experiment_id=experiment_id)
        with self._lock:
            # Unknown IDs are cached too; the bound keeps a stream of them from growing the dict forever.
            if len(self._entries) >= MAX_CACHED_EXPERIMENTS:
                self._entries.clear()
            self._entries[cache_key] = (now + settings.ASSIGNMENT_CONFIG_CACHE_SECONDS, state)
        return state

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


experiment_states = ExperimentStateCache()
