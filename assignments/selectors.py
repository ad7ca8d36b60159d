"""Reads that more than one caller needs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from assignments.hashing import Allocation
from assignments.models import Cohort, Experiment, SubjectType, Variant

MAX_CACHED_EXPERIMENTS = 10_000
# How long a process trusts its list of subject types: one archived elsewhere is refused within this time.
SUBJECT_TYPE_CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class ExperimentState:
    """What the hot path needs to answer for one experiment, loaded in one go and cached.

    `version` is the experiment's resource_version, which every apply that changes
    the experiment, its variants or its splits raises; the hot path compares it
    with the stored one in a statement it runs anyway, so a cached state is never
    used once stale.
    """

    pk: int
    key: str
    version: int
    status: str
    salt: str
    cohort: int
    allocation: Allocation[int]
    winning_variant_pk: int | None
    variant_keys: dict[int, str]

    def variant_pk_for(self, subject_id: str) -> int:
        return self.allocation.variant_for(self.salt, subject_id)


def experiment_get_ci(*, experiment_id: str) -> Experiment | None:
    return Experiment.objects.get_ci(experiment_id)


def experiment_cohort_current(*, experiment_pk: int) -> int:
    """The number of the experiment's current cohort: the one new assignments are made in."""
    number = Cohort.objects.filter(experiment=experiment_pk).order_by("-number").values_list("number", flat=True)
    return number.first() or 1


def experiment_version_get(*, experiment_pk: int) -> int | None:
    return Experiment.objects.filter(pk=experiment_pk).values_list("resource_version", flat=True).first()


def experiment_state_load(*, experiment_id: str) -> ExperimentState | None:
    """The experiment's current state from the database (three small queries)."""
    experiment = experiment_get_ci(experiment_id=experiment_id)
    if experiment is None:
        return None
    variants = list(
        Variant.objects.filter(experiment=experiment).order_by("position").values_list("pk", "key", "split")
    )
    return ExperimentState(
        pk=experiment.pk,
        key=experiment.key,
        version=experiment.resource_version,
        status=experiment.status,
        salt=experiment.salt,
        cohort=experiment_cohort_current(experiment_pk=experiment.pk),
        allocation=Allocation([(pk, split) for pk, _, split in variants]),
        winning_variant_pk=experiment.winning_variant_id,
        variant_keys={pk: key for pk, key, _ in variants},
    )


class ExperimentStateCache:
    """Per-process cache of ExperimentState by lower-cased experiment ID.

    Entries are not trusted blindly: callers check `version` against the database
    and `forget` a stale entry. Unknown experiments are not cached, so one created
    by another process is found on the next request.
    """

    def __init__(self) -> None:
        self._entries: dict[str, ExperimentState] = {}
        self._lock = threading.Lock()

    def get(self, experiment_id: str) -> ExperimentState | None:
        cache_key = experiment_id.lower()
        state = self._entries.get(cache_key)
        if state is not None:
            return state
        state = experiment_state_load(experiment_id=experiment_id)
        if state is not None:
            with self._lock:
                # Bounded by the number of experiments; the guard only stops pathological growth.
                if len(self._entries) >= MAX_CACHED_EXPERIMENTS:
                    self._entries.clear()
                self._entries[cache_key] = state
        return state

    def forget(self, experiment_id: str) -> None:
        with self._lock:
            self._entries.pop(experiment_id.lower(), None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


experiment_states = ExperimentStateCache()


class SubjectTypeCache:
    """Per-process map of every subject type by lower-cased ID, for /id-link.

    Loaded whole in one query (subject types are a handful of rows) and trusted
    for SUBJECT_TYPE_CACHE_SECONDS, so a link costs no lookup of its types. An ID
    it does not hold reloads it at once: a type created by another process is
    known on the next request, and an unknown ID costs the one query it always did.
    """

    def __init__(self) -> None:
        self._snapshot: tuple[float, dict[str, SubjectType]] = (float("-inf"), {})

    def _load(self) -> dict[str, SubjectType]:
        types = {subject_type.key.lower(): subject_type for subject_type in SubjectType.objects.all()}
        self._snapshot = (time.monotonic(), types)
        return types

    def get(self, subject_type_id: str) -> SubjectType | None:
        loaded_at, types = self._snapshot
        reloaded = time.monotonic() - loaded_at > SUBJECT_TYPE_CACHE_SECONDS
        if reloaded:
            types = self._load()
        subject_type = types.get(subject_type_id.lower())
        if subject_type is None and not reloaded:
            subject_type = self._load().get(subject_type_id.lower())
        return subject_type

    def clear(self) -> None:
        self._snapshot = (float("-inf"), {})


subject_types = SubjectTypeCache()
