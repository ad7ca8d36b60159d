"""Reads that more than one caller needs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from django.db.models import Max, Q, QuerySet, Sum
from django.db.models.functions import Lower

from assignments.cache import CATALOG, experiment_catalog, experiment_states, subject_types
from assignments.errors import UnknownSubjectType
from assignments.gates import Gates
from assignments.hashing import Allocation
from assignments.models import Cohort, Experiment, ExperimentHoldout, Layer, SubjectType, Variant, is_resource_id
from core.steps import Steps

# The statuses in which an experiment answers with a variant.
RUNNING_STATUSES = (Experiment.Status.ACTIVE, Experiment.Status.WINNER_DECLARED)


@dataclass(frozen=True)
class ExperimentState:
    """What the hot path needs to answer for one experiment (or holdout), loaded in one go and cached.

    `version` is the experiment's resource_version, which every apply that changes
    the experiment, its variants or its splits raises; the hot path compares it
    with the stored one in a statement it runs anyway, so a cached state is never
    used once stale. A state that also depends on other resources, its holdouts'
    status or its layer's salt, is checked against experiment_catalog_version
    instead, `catalog_version` as read before it was loaded.
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
    control_pk: int
    subject_type_key: str
    gates: Gates
    kind: str = Experiment.Kind.EXPERIMENT
    catalog_version: int = 0
    # spec.valueType ("" for none) and each variant's value by variant ID (Variant.value).
    value_type: str = ""
    variant_values: dict[str, Any] = field(default_factory=dict)
    # spec.bulkEvaluation: listed by an OpenFeature bulk evaluation.
    bulk_evaluation: bool = True
    # Every holdout covering the experiment, in the order listed; their states, for the active ones.
    holdout_pks: tuple[int, ...] = ()
    holdouts: tuple[ExperimentState, ...] = ()

    @property
    def checked_by_catalog(self) -> bool:
        return bool(self.holdout_pks) or self.gates.layer is not None

    @property
    def screened(self) -> bool:
        """Whether any gate may keep a new subject out."""
        return self.gates.any or bool(self.holdouts)

    def variant_pk_for(self, subject_id: str) -> int:
        return self.allocation.variant_for(self.salt, subject_id)

    def value_of(self, variant_key: str) -> Any:
        """The value the API serves for the variant: its stored value, or its ID without a value type. A variant
        added after the state was loaded is read."""
        if not self.value_type:
            return variant_key
        if variant_key not in self.variant_values:
            value = Variant.objects.filter(experiment=self.pk, key=variant_key).values_list("value", flat=True).first()
            return value_as_typed(self.value_type, value)
        return self.variant_values[variant_key]


def value_as_typed(value_type: str, value: Any) -> Any:
    """A stored value as its type serves it: PostgreSQL's JSON hands a float from 1e16 on back as an integer."""
    return float(value) if value_type == Experiment.ValueType.FLOAT and value is not None else value


def experiment_get_ci(*, experiment_id: str) -> Experiment | None:
    return Experiment.objects.get_ci(experiment_id)


def experiment_cohort_current(*, experiment_pk: int) -> int:
    """The number of the experiment's current cohort: the one new assignments are made in."""
    number = Cohort.objects.filter(experiment=experiment_pk).order_by("-number").values_list("number", flat=True)
    return number.first() or 1


def experiment_states_load(experiments: QuerySet[Experiment]) -> list[ExperimentState]:
    """The current state of each of these experiments, with the states of the holdouts covering them,
    in a few queries however many they are.

    The catalog version is read first and the experiments (with their current
    cohort) before their variants: a change committed in between is newer than the
    versions read, so the hot path's version check finds it stale and loads it again.
    """
    catalog_version = experiment_catalog_version()
    covering: dict[int, list[int]] = defaultdict(list)
    for experiment_pk, holdout_pk in ExperimentHoldout.objects.filter(
        experiment__in=experiments.values("pk")
    ).values_list("experiment", "holdout"):
        covering[experiment_pk].append(holdout_pk)
    wanted = Experiment.objects.filter(
        Q(pk__in=experiments.values("pk")) | Q(pk__in={pk for pks in covering.values() for pk in pks})
    )
    rows = list(
        wanted.annotate(current_cohort=Max("cohorts__number")).values_list(
            "pk",
            "key",
            "resource_version",
            "status",
            "subject_type",
            "salt",
            "current_cohort",
            "winning_variant",
            "follow_links",
            "subject_type__key",
            "subject_type__attributes",
            "enrollment_start_at",
            "enrollment_stop_at",
            "targeting",
            "coverage",
            "kind",
            "layer__salt",
            "slots",
            "bulk_evaluation",
            "value_type",
        )
    )
    if not rows:
        return []
    variants: dict[int, list[tuple[int, str, float]]] = defaultdict(list)
    value_types = {row[0]: row[-1] for row in rows}
    values: dict[int, dict[str, Any]] = defaultdict(dict)
    controls: dict[int, int] = {}
    for experiment_pk, pk, key, split, is_control, value in (
        Variant.objects.filter(experiment__in=[row[0] for row in rows])
        .order_by("experiment", "position")
        .values_list("experiment", "pk", "key", "split", "is_control", "value")
    ):
        variants[experiment_pk].append((pk, key, split))
        values[experiment_pk][key] = value_as_typed(value_types[experiment_pk], value)
        if is_control:
            controls[experiment_pk] = pk
    states = {
        pk: ExperimentState(
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
            control_pk=controls[pk],
            subject_type_key=subject_type_key,
            gates=Gates.stored(
                start_at=start_at,
                stop_at=stop_at,
                layer_salt=layer_salt,
                slots=slots,
                targeting=targeting,
                attributes=attributes,
                coverage=coverage,
            ),
            kind=kind,
            catalog_version=catalog_version,
            value_type=value_type,
            variant_values=values[pk] if value_type else {},
            bulk_evaluation=bulk_evaluation,
        )
        for (
            pk,
            key,
            version,
            status,
            subject_type_pk,
            salt,
            cohort,
            winning_variant_pk,
            follow_links,
            subject_type_key,
            attributes,
            start_at,
            stop_at,
            targeting,
            coverage,
            kind,
            layer_salt,
            slots,
            bulk_evaluation,
            value_type,
        ) in rows
    }
    for pk, holdout_pks in covering.items():
        states[pk] = replace(
            states[pk],
            holdout_pks=tuple(holdout_pks),
            holdouts=tuple(
                states[holdout_pk]
                for holdout_pk in holdout_pks
                if states[holdout_pk].status == Experiment.Status.ACTIVE
            ),
        )
    return list(states.values())


def experiment_state_load(*, experiment_id: str) -> ExperimentState | None:
    """The experiment's current state from the database, or None if no experiment has that ID
    (a holdout's included: the assignment endpoints do not answer for holdouts)."""
    if not is_resource_id(experiment_id):
        return None
    states = experiment_states_load(
        Experiment.objects.get_ci_all(experiment_id).filter(kind=Experiment.Kind.EXPERIMENT)
    )
    return next((state for state in states if state.kind == Experiment.Kind.EXPERIMENT), None)


def experiment_state_get(*, experiment_id: str, bypass_cache: bool = False) -> ExperimentState | None:
    """The experiment's state from this process's cache, loaded on a miss.

    The caller checks its `version` against the database, and asks again with
    `bypass_cache` when it is stale.
    """
    return experiment_states.get_or_load(
        experiment_id.lower(), lambda: experiment_state_load(experiment_id=experiment_id), bypass_cache=bypass_cache
    )


def experiment_state_cached(*, experiment_id: str) -> ExperimentState | None:
    """The experiment's state if this process's cache holds it, without a query; else None (experiment_state_get
    loads it)."""
    return experiment_states.get(experiment_id.lower())


def experiment_catalog_version() -> int:
    """A number that grows with every change of any experiment, holdout or layer: the sum of their
    resource versions.

    They are never deleted, a new one adds its version, and every real change raises
    one resource's version, so the sum moves whenever anything that the catalog holds
    changes. storage.py's catalog head row computes the same sum.
    """
    experiments = Experiment.objects.aggregate(total=Sum("resource_version"))["total"] or 0
    return experiments + (Layer.objects.aggregate(total=Sum("resource_version"))["total"] or 0)


@dataclass(frozen=True)
class ExperimentCatalog:
    """Every experiment's state, for POST /assignments, which names many experiments or none."""

    version: int
    # Experiments only: the assignment endpoints do not answer for holdouts.
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


def experiment_catalog_load() -> ExperimentCatalog:
    """Every experiment's state, in a few queries."""
    states = experiment_states_load(Experiment.objects.filter(kind=Experiment.Kind.EXPERIMENT))
    ordered = sorted(
        (state for state in states if state.kind == Experiment.Kind.EXPERIMENT), key=lambda state: state.key.lower()
    )
    return ExperimentCatalog(
        version=states[0].catalog_version if states else experiment_catalog_version(),
        by_key={state.key.lower(): state for state in ordered},
        ordered=tuple(ordered),
    )


def experiment_catalog_get(*, bypass_cache: bool = False) -> ExperimentCatalog:
    """The catalog from this process's cache, loaded on a miss (a few queries however many experiments there are).

    The caller checks its `version` against experiment_catalog_version in a statement
    it runs anyway, and asks again with `bypass_cache` when it moved, so an experiment
    created or changed by any process is seen by the next request. Experiments are a
    few hundred rows, and they change a few times a day.
    """
    return experiment_catalog.get_or_load(CATALOG, experiment_catalog_load, bypass_cache=bypass_cache)


def experiment_catalog_cached() -> ExperimentCatalog | None:
    """The catalog if this process's cache holds it, without a query; else None (experiment_catalog_get loads it)."""
    return experiment_catalog.get(CATALOG)


def subject_type_get(*, subject_type_id: str) -> SubjectType | None:
    """The subject type with this ID (any case), from this process's cache.

    An ID it does not hold, or holds past SUBJECT_TYPE_CACHE_SECONDS, reloads every
    type in one query: a type created by another process is known on the next
    request, and an unknown ID costs the one query it always did.
    """
    subject_type = subject_type_cached(subject_type_id=subject_type_id)
    if subject_type is None:
        loaded = {subject_type.key.lower(): subject_type for subject_type in SubjectType.objects.all()}
        for key, value in loaded.items():
            subject_types.put(key, value)
        subject_type = loaded.get(subject_type_id.lower())
    return subject_type


def subject_type_cached(*, subject_type_id: str) -> SubjectType | None:
    """The subject type with this ID (any case) if this process's cache holds it, without a query; else None
    (subject_type_get reloads the types)."""
    return subject_types.get(subject_type_id.lower())


def subject_types_cached(type_ids: dict[str, str]) -> dict[str, SubjectType] | None:
    """subject_types_active's answer when this process's cache holds every type named and each is active,
    without a query; else None (subject_types_active looks again, or raises naming the paths)."""
    found = {}
    for path, type_id in type_ids.items():
        subject_type = subject_type_cached(subject_type_id=type_id) if is_resource_id(type_id) else None
        if subject_type is None or subject_type.status != SubjectType.Status.ACTIVE:
            return None
        found[path] = subject_type
    return found


def subject_types_active_steps(type_ids: dict[str, str]) -> Steps[dict[str, SubjectType]]:
    """subject_types_active as steps (core/steps.py): from the cache with no step when it holds every type
    named and each is active, else one step of the sync connection."""
    return subject_types_cached(type_ids) or (yield partial(subject_types_active, type_ids))


def subject_types_active(type_ids: dict[str, str]) -> dict[str, SubjectType]:
    """The active subject type named by each value, keyed as given (by the field path it came from).

    Raises UnknownSubjectType naming every path whose type does not exist or is archived
    (as this process last saw them, at most SUBJECT_TYPE_CACHE_SECONDS ago).
    """
    found = {
        path: subject_type_get(subject_type_id=type_id) if is_resource_id(type_id) else None
        for path, type_id in type_ids.items()
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


def holdouts_named(experiment_ids: list[str]) -> list[str]:
    """Those of these IDs that name a holdout, ignoring case, as given and in their order: asked only for IDs
    that name no experiment, to tell the caller why."""
    wanted = {experiment_id.lower() for experiment_id in experiment_ids if is_resource_id(experiment_id)}
    found = set(
        Experiment.objects.filter(kind=Experiment.Kind.HOLDOUT)
        .annotate(lkey=Lower("key"))
        .filter(lkey__in=wanted)
        .values_list("lkey", flat=True)
    )
    return [experiment_id for experiment_id in experiment_ids if experiment_id.lower() in found]
