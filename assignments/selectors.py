"""Reads that more than one caller needs."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Max, QuerySet, Sum

from assignments.errors import UnknownSubjectType
from assignments.hashing import Allocation
from assignments.models import Cohort, Experiment, SubjectType, Variant, is_resource_id

MAX_CACHED_EXPERIMENTS = 10_000
# The statuses in which an experiment answers with a variant.
RUNNING_STATUSES = (Experiment.Status.ACTIVE, Experiment.Status.WINNER_DECLARED)
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
    subject_type_pk: int
    salt: str
    cohort: int
    allocation: Allocation[int]
    winning_variant_pk: int | None
    variant_keys: dict[int, str]
    follow_links: bool

    def variant_pk_for(self, subject_id: str) -> int:
        return self.allocation.variant_for(self.salt, subject_id)


def experiment_get_ci(*, experiment_id: str) -> Experiment | None:
    return Experiment.objects.get_ci(experiment_id)


def experiment_cohort_current(*, experiment_pk: int) -> int:
    """The number of the experiment's current cohort: the one new assignments are made in."""
    number = Cohort.objects.filter(experiment=experiment_pk).order_by("-number").values_list("number", flat=True)
    return number.first() or 1


def experiment_states_load(experiments: QuerySet[Experiment]) -> list[ExperimentState]:
    """The current state of each of these experiments, in two queries however many they are.

    The experiments (with their current cohort) are read before their variants: a
    change committed in between is newer than the versions read, so the hot path's
    version check finds it stale and loads it again.
    """
    rows = list(
        experiments.annotate(current_cohort=Max("cohorts__number")).values_list(
            "pk",
            "key",
            "resource_version",
            "status",
            "subject_type",
            "salt",
            "current_cohort",
            "winning_variant",
            "follow_links",
        )
    )
    if not rows:
        return []
    variants: dict[int, list[tuple[int, str, float]]] = defaultdict(list)
    for experiment_pk, pk, key, split in (
        Variant.objects.filter(experiment__in=experiments.values("pk"))
        .order_by("experiment", "position")
        .values_list("experiment", "pk", "key", "split")
    ):
        variants[experiment_pk].append((pk, key, split))
    return [
        ExperimentState(
            pk=pk,
            key=key,
            version=version,
            status=status,
            subject_type_pk=subject_type_pk,
            salt=salt,
            cohort=cohort or 1,
            allocation=Allocation([(variant_pk, split) for variant_pk, _, split in variants[pk]]),
            winning_variant_pk=winning_variant_pk,
            variant_keys={variant_pk: variant_key for variant_pk, variant_key, _ in variants[pk]},
            follow_links=follow_links,
        )
        for pk, key, version, status, subject_type_pk, salt, cohort, winning_variant_pk, follow_links in rows
    ]


def experiment_state_load(*, experiment_id: str) -> ExperimentState | None:
    """The experiment's current state from the database, or None if no experiment has that ID."""
    if not is_resource_id(experiment_id):
        return None
    states = experiment_states_load(Experiment.objects.get_ci_all(experiment_id))
    return states[0] if states else None


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


def experiment_catalog_version() -> int:
    """A number that grows with every change of any experiment: the sum of their resource versions.

    Experiments are never deleted, a new one adds its version, and every real change
    raises one experiment's version, so the sum moves whenever anything that the
    catalog holds changes.
    """
    return Experiment.objects.aggregate(total=Sum("resource_version"))["total"] or 0


@dataclass(frozen=True)
class ExperimentCatalog:
    """Every experiment's state, for POST /assignments, which names many experiments or none."""

    version: int
    by_key: dict[str, ExperimentState]
    # Ordered by lower-cased experiment ID: the order of an answer for all running experiments.
    ordered: tuple[ExperimentState, ...]

    def get(self, experiment_id: str) -> ExperimentState | None:
        return self.by_key.get(experiment_id.lower())

    def running(self, subject_type_pks: set[int]) -> list[ExperimentState]:
        """The active and winner-declared experiments of these subject types."""
        return [
            state
            for state in self.ordered
            if state.subject_type_pk in subject_type_pks and state.status in RUNNING_STATUSES
        ]


class ExperimentCatalogCache:
    """Per-process ExperimentCatalog, checked like ExperimentStateCache's entries.

    The hot path reads experiment_catalog_version in a statement it runs anyway and
    reloads the whole catalog (two queries) when it moved, so an experiment created or
    changed by any process is seen by the next request. Experiments are a few hundred
    rows, and they change a few times a day.
    """

    def __init__(self) -> None:
        self._catalog: ExperimentCatalog | None = None

    def get(self, *, bypass_cache: bool = False) -> ExperimentCatalog:
        catalog = self._catalog
        if catalog is None or bypass_cache:
            ordered = sorted(experiment_states_load(Experiment.objects.all()), key=lambda state: state.key.lower())
            # experiment_catalog_version of the rows just read, in the statement that read them.
            catalog = ExperimentCatalog(
                version=sum(state.version for state in ordered),
                by_key={state.key.lower(): state for state in ordered},
                ordered=tuple(ordered),
            )
            self._catalog = catalog
        return catalog

    def clear(self) -> None:
        self._catalog = None


experiment_catalog = ExperimentCatalogCache()


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


def subject_types_active(type_ids: dict[str, str]) -> dict[str, SubjectType]:
    """The active subject type named by each value, keyed as given (by the field path it came from).

    Raises UnknownSubjectType naming every path whose type does not exist or is archived
    (as this process last saw them, at most SUBJECT_TYPE_CACHE_SECONDS ago).
    """
    found = {
        path: subject_types.get(type_id) if is_resource_id(type_id) else None for path, type_id in type_ids.items()
    }
    errors = []
    for path, subject_type in found.items():
        if subject_type is None:
            message = f"no subject type has the ID {type_ids[path]!r}"
        elif subject_type.status != SubjectType.Status.ACTIVE:
            message = f"subject type {subject_type.key!r} is {subject_type.status}"
        else:
            continue
        errors.append({"field": path, "message": message})
    if errors:
        raise UnknownSubjectType("; ".join(f"{e['field']}: {e['message']}" for e in errors), errors=errors)
    return found
