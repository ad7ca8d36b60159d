"""The apply of configuration resources: the one write path of apply_resources and the admin.

Every rule that needs the database (references, the forward-only lifecycle,
what existing assignments freeze, cohorts) is checked here, and every real
change is recorded in the resource's history (ResourceChange) in the same
transaction.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models.functions import Lower

from assignments import gates
from assignments.configuration import holdouts, layers
from assignments.configuration.apply_writes import (
    cohort_change,
    lab_get_ci,
    model_update,
    resource_version_raise,
    same,
    variants_write,
)
from assignments.configuration.document_reader import kind_with_article
from assignments.configuration.experiment_groups import subject_type_problems
from assignments.configuration.export import experiment_population, resource_document
from assignments.configuration.holdouts import HoldoutSpec
from assignments.configuration.layers import LayerSpec
from assignments.configuration.resources import (
    KINDS,
    ExperimentSpec,
    LabSpec,
    ResourceInvalid,
    ResourceProblem,
    ResourceSpec,
    Source,
    SubjectTypeSpec,
    resource_read,
    resources_check_unique,
)
from assignments.configuration.salts import salt_problems
from assignments.models import (
    Assignment,
    Cohort,
    Experiment,
    Lab,
    Layer,
    ResourceChange,
    SubjectType,
    Variant,
)
from core.cache import caches_clear

MODELS = {"subjecttype": SubjectType, "lab": Lab, "layer": Layer, "holdout": Experiment, "experiment": Experiment}
# Where a document built by the admin comes from, in error messages and history.
ADMIN_SOURCE = Source("admin", 1)


@dataclass(frozen=True)
class Actor:
    """Who makes a change, as the history records it."""

    name: str
    channel: str  # ResourceChange.Channel

    @classmethod
    def command(cls) -> Actor:
        """The operating-system user running a management command."""
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            # A container may run under a UID that has no passwd entry.
            name = f"uid {os.getuid()}"
        return cls(name=name, channel=ResourceChange.Channel.COMMAND)

    @classmethod
    def staff(cls, username: str) -> Actor:
        return cls(name=username, channel=ResourceChange.Channel.ADMIN)


@dataclass(frozen=True)
class ApplyResult:
    kind: str
    key: str
    outcome: str  # created | updated | unchanged

    def __str__(self) -> str:
        return f"{self.kind} {self.key}: {self.outcome}"


def _get_ci(model, key: str, *, for_update: bool = False):
    queryset = model.objects.select_for_update() if for_update else model.objects.all()
    return queryset.get_ci(key)


def _apply_plain(spec: SubjectTypeSpec | LabSpec) -> str:
    model = MODELS[spec.kind]
    values: dict[str, Any] = {"key": spec.key, "name": spec.name, "description": spec.description}
    if isinstance(spec, SubjectTypeSpec):
        values["status"] = spec.status
        values["attributes"] = spec.attribute_documents()
    instance = _get_ci(model, spec.key, for_update=True)
    if instance is None:
        model.objects.create(**values)
        return "created"
    return "updated" if model_update(instance, values) else "unchanged"


def _stored_splits(experiment: Experiment) -> list[tuple[str, float]]:
    return [(variant.key.lower(), variant.split) for variant in experiment.variants.order_by("position")]


def _check_experiment_change(
    experiment: Experiment, spec: ExperimentSpec, subject_type: SubjectType, *, has_assignments: bool
) -> list[ResourceProblem]:
    errors = []
    where = spec.where
    if not experiment.can_move_to(spec.status):
        errors.append(
            ResourceProblem(where, "metadata.status", f"cannot go back from {experiment.status} to {spec.status}")
        )
    if has_assignments and subject_type.pk != experiment.subject_type_id:
        errors.append(ResourceProblem(where, "spec.subjectType", "cannot change once the experiment has assignments"))
    if has_assignments and spec.effective_salt != experiment.salt:
        errors.append(ResourceProblem(where, "spec.salt", "cannot change once the experiment has assignments"))
    kept = {variant.key.lower() for variant in spec.variants}
    for variant in experiment.variants.all():
        if variant.key.lower() not in kept and Assignment.objects.filter(variant=variant).exists():
            message = f"variant {variant.key!r} has assignments and cannot be removed"
            errors.append(ResourceProblem(where, "spec.variants", message))
    return errors


def _experiment_problems(
    spec: ExperimentSpec, experiment: Experiment | None, subject_type: SubjectType
) -> tuple[list[ResourceProblem], Layer | None, list[Experiment]]:
    """Every reason to refuse the experiment's document, the stored layer its spec.layer names, and the
    holdouts that will cover it before any binding by scope (those listed, or else those it has)."""
    where = spec.where
    problems = salt_problems(salt=spec.effective_salt, own=experiment, where=where)
    layer, layer_problems = layers.placement_resolve(spec.layer, subject_type, where)
    listed, holdout_problems = holdouts.holdouts_resolve(spec.holdouts, subject_type, where)
    stored_holdouts = [] if experiment is None else holdouts.holdouts_stored(experiment)
    problems += layer_problems + holdout_problems
    if listed is None:
        problems += holdouts.holdouts_kept_problems(stored_holdouts, subject_type, where)
    if experiment is not None:
        has_assignments = Assignment.objects.filter(experiment=experiment).exists()
        problems += _check_experiment_change(experiment, spec, subject_type, has_assignments=has_assignments)
        if has_assignments and not layer_problems:
            problems += layers.placement_fixed_problems(experiment, spec.layer, layer, where)
        if has_assignments and not holdout_problems:
            problems += holdouts.holdouts_fixed_problems(stored_holdouts, listed, where)
    targeting_problems = gates.targeting_problems(spec.targeting or [], subject_type.attribute_types())
    problems += [ResourceProblem(where, path, message) for path, message in targeting_problems]
    return problems, layer, stored_holdouts if listed is None else listed


def _apply_experiment(spec: ExperimentSpec) -> str:
    """Create or update the experiment: "created", "updated" or "unchanged"; ResourceInvalid when refused."""
    where = spec.where
    lab = lab_get_ci(spec.lab)
    subject_type, problems = subject_type_problems(spec.subject_type, where)
    if lab is None:
        problems.insert(0, ResourceProblem(where, "metadata.parentId", f"no lab {spec.lab!r}"))
    if problems:
        raise ResourceInvalid(problems)
    experiment = _get_ci(Experiment, spec.key, for_update=True)
    created = experiment is None
    problems, layer, covering = _experiment_problems(spec, experiment, subject_type)
    if problems:
        raise ResourceInvalid(problems)
    # Statuses only move forward: a draft that becomes active does so for the first time.
    if spec.status == Experiment.Status.ACTIVE and (created or experiment.status == Experiment.Status.DRAFT):
        listed = {holdout.pk for holdout in covering}
        covering = covering + [h for h in holdouts.holdouts_in_scope(subject_type, lab.key) if h.pk not in listed]
    if created:
        experiment = Experiment.objects.create(
            key=spec.key,
            name=spec.name,
            description=spec.description,
            lab=lab,
            subject_type=subject_type,
            hypothesis=spec.hypothesis,
            salt=spec.effective_salt,
        )
        old_allocation = None
    else:
        old_allocation = (_stored_splits(experiment), experiment_population(experiment))
    variants_changed, removed_variants = variants_write(experiment, spec.variants)
    population = spec.population(layer)
    new_allocation = ([(variant.key.lower(), variant.split) for variant in spec.variants], population)
    if created:
        Cohort.objects.create(experiment=experiment, number=1, splits=spec.splits(), population=population)
    elif not same(new_allocation, old_allocation):
        running = Experiment.status_rank(experiment.status) >= Experiment.status_rank(Experiment.Status.ACTIVE)
        cohort_change(experiment, running=running, splits=spec.splits(), population=population)
    holdouts_changed = holdouts.holdouts_write(experiment, covering)
    winner = None
    if spec.winning_variant is not None:
        winner = experiment.variants.alias(lkey=Lower("key")).get(lkey=spec.winning_variant.lower())
    values = {
        "key": spec.key,
        "name": spec.name,
        "description": spec.description,
        "lab_id": lab.pk,
        "subject_type_id": subject_type.pk,
        "hypothesis": spec.hypothesis,
        "salt": spec.effective_salt,
        "status": spec.status,
        "winning_variant_id": winner.pk if winner else None,
        "follow_links": spec.follow_links,
        "enrollment_start_at": spec.enrollment_start_at,
        "enrollment_stop_at": spec.enrollment_stop_at,
        "targeting": spec.targeting,
        "coverage": spec.coverage,
        "layer_id": None if layer is None else layer.pk,
        "slots": None if layer is None else layers.slots_document(spec.layer.slots),
        "value_type": spec.value_type,
        "bulk_evaluation": spec.bulk_evaluation,
    }
    if created:
        for name, value in values.items():
            setattr(experiment, name, value)
        experiment.save()
        return "created"
    if model_update(experiment, values):
        outcome = "updated"
    elif variants_changed or holdouts_changed:
        resource_version_raise(experiment)
        outcome = "updated"
    else:
        outcome = "unchanged"
    Variant.objects.filter(pk__in=removed_variants).delete()
    return outcome


def _retyped_targeting(spec: SubjectTypeSpec) -> dict[int, tuple[list, list[str]]]:
    """Before the apply: the experiments of the subject type whose targeting names an attribute the spec
    retypes, as experiment primary key -> (its targeting, those attributes)."""
    stored = SubjectType.objects.get_ci(spec.key)
    if stored is None:
        return {}
    old_types = stored.attribute_types()
    retyped = {
        name for name, attribute_type in spec.attributes if old_types.get(name, attribute_type) != attribute_type
    }
    if not retyped:
        return {}
    experiments = Experiment.objects.filter(subject_type=stored, targeting__isnull=False)
    targets = {}
    for pk, targeting in experiments.values_list("pk", "targeting"):
        names = gates.targeting_attributes(targeting) & retyped
        if names:
            targets[pk] = (targeting, sorted(names))
    return targets


def _check_targeted_attributes(
    spec: SubjectTypeSpec, applied: set[str], retyped_targeting: dict[int, tuple[list, list[str]]]
) -> list[ResourceProblem]:
    """A subject type may not drop or retype an attribute that an experiment of its type targets, unless the
    same apply changes that experiment's targeting (which _apply_experiment checks against the new
    declaration). A retyped attribute whose conditions still hold as well for the new type (`exists`, or
    `equals: "2.3"` from string to version) is refused too: the same document would select other subjects,
    and without a change of targeting no cohort would start."""
    types = dict(spec.attributes)
    errors = []
    experiments = Experiment.objects.filter(
        subject_type__in=SubjectType.objects.get_ci_all(spec.key), targeting__isnull=False
    )
    for pk, key, targeting in experiments.order_by("key").values_list("pk", "key", "targeting"):
        problems = [] if key.lower() in applied else gates.targeting_problems(targeting, types)
        for path, message in problems:
            why = f"experiment {key!r} targets it ({path}: {message}); change that experiment's targeting first"
            errors.append(ResourceProblem(spec.where, "spec.attributes", why))
        before = retyped_targeting.get(pk)
        if not problems and before is not None and same(targeting, before[0]):
            why = (
                f"retypes {', '.join(map(repr, before[1]))}, which experiment {key!r} targets: its conditions would "
                "select other subjects without a new cohort; change that experiment's targeting first, or in the "
                "same apply"
            )
            errors.append(ResourceProblem(spec.where, "spec.attributes", why))
    return errors


def _history_record(model, spec: ResourceSpec, before: dict | None, actor: Actor) -> None:
    resource = _get_ci(model, spec.key)
    ResourceChange.objects.create(
        kind=spec.kind,
        resource_id=resource.key,
        resource_version=resource.resource_version,
        actor=actor.name,
        channel=actor.channel,
        before=before,
        after=resource_document(resource, with_version=False),
    )


def _apply_one(spec: ResourceSpec, actor: Actor, *, create_only: bool, check_versions: bool) -> str:
    """Apply one document: "created", "updated" or "unchanged"; ResourceInvalid when it is refused, before
    anything of it is written."""
    model = MODELS[spec.kind]
    stored = _get_ci(model, spec.key, for_update=True)
    if isinstance(stored, Experiment) and stored.kind != spec.kind:
        message = (
            f"{stored.key!r} is {kind_with_article(stored.kind)} (experiments and holdouts share IDs, ignoring case)"
        )
        raise ResourceInvalid([ResourceProblem(spec.where, "metadata.id", message)])
    if stored is not None and create_only:
        message = f"a {spec.kind} {stored.key!r} exists (IDs ignore case)"
        raise ResourceInvalid([ResourceProblem(spec.where, "metadata.id", message)])
    if check_versions and stored is not None and spec.version is not None and spec.version != stored.resource_version:
        message = (
            f"changed by someone else since version {spec.version} was read (now version "
            f"{stored.resource_version}): reload to see the change, then edit again"
        )
        raise ResourceInvalid([ResourceProblem(spec.where, "metadata.resourceVersion", message)])
    before = None if stored is None else resource_document(stored, with_version=False)
    if isinstance(spec, ExperimentSpec):
        outcome = _apply_experiment(spec)
    elif isinstance(spec, LayerSpec):
        outcome = layers.layer_apply(spec)
    elif isinstance(spec, HoldoutSpec):
        outcome = holdouts.holdout_apply(spec)
    else:
        outcome = _apply_plain(spec)
    if outcome in ("created", "updated"):
        _history_record(model, spec, before, actor)
    return outcome


def _check_between_documents(
    specs: list[ResourceSpec], outcomes: dict[int, str], applied: set[str]
) -> list[ResourceProblem]:
    """What holds between documents, checked after the whole apply: the slots of a layer's active experiments
    do not overlap, and layers and holdouts share the subject type of their experiments. Pairs with a refused
    document are left out: what they would say is about a state the apply does not make."""
    experiments = [(index, spec) for index, spec in enumerate(specs) if isinstance(spec, ExperimentSpec)]
    placed = {spec.key.lower(): (index, spec.where) for index, spec in experiments if index in outcomes}
    refused = {spec.key.lower() for index, spec in experiments if index not in outcomes}
    errors = layers.overlaps_problems(placed, refused)
    for index, spec in enumerate(specs):
        if isinstance(spec, LayerSpec) and index in outcomes:
            errors += layers.layer_members_problems(spec, applied)
        elif isinstance(spec, HoldoutSpec) and index in outcomes:
            errors += holdouts.holdout_members_problems(spec, applied)
    return errors


def resources_apply(
    *,
    specs: list[ResourceSpec],
    actor: Actor,
    dry_run: bool = False,
    create_only: bool = False,
    check_versions: bool = False,
) -> list[ApplyResult]:
    """Apply every resource in one transaction, or none (ResourceInvalid lists why).

    The kinds go in the order of KINDS (subject types, labs, layers, holdouts,
    experiments), so each may refer to resources of the kinds before it defined
    in the same apply, and an experiment activated in it is bound to the holdouts
    it defines. What holds between documents (the slots of a layer's active
    experiments, the subject types of layers and holdouts and of the experiments
    in them) is checked once all are applied, against the state they make
    together. A dry run does all the work, then rolls it back. With
    `create_only` (the admin's add form) a resource that exists is refused
    rather than updated. With `check_versions` (the admin's change form) a spec
    read at another resourceVersion than the stored one is refused, so an edit
    made on a page opened before someone else's change cannot silently undo it;
    configuration as code applies whatever the file says.
    """
    resources_check_unique(specs)
    order = {kind: position for position, kind in enumerate(KINDS)}
    outcomes: dict[int, str] = {}
    errors: list[ResourceProblem] = []
    with transaction.atomic():
        retyped_targeting = {
            spec.key.lower(): _retyped_targeting(spec) for spec in specs if isinstance(spec, SubjectTypeSpec)
        }
        for index, spec in sorted(enumerate(specs), key=lambda item: order[item[1].kind]):
            try:
                outcomes[index] = _apply_one(spec, actor, create_only=create_only, check_versions=check_versions)
            except ResourceInvalid as refused:
                errors.extend(refused.problems)
        applied = {spec.key.lower() for spec in specs if isinstance(spec, ExperimentSpec)}
        for spec in specs:
            if isinstance(spec, SubjectTypeSpec):
                errors.extend(_check_targeted_attributes(spec, applied, retyped_targeting[spec.key.lower()]))
        errors.extend(_check_between_documents(specs, outcomes, applied))
        if errors:
            transaction.set_rollback(True)
            raise ResourceInvalid(errors)
        if dry_run:
            transaction.set_rollback(True)
    # Answer from the new state in this process at once; other processes see the new
    # resource_version on their next request, and new subject types at once (archived
    # ones within SUBJECT_TYPE_CACHE_SECONDS). One call empties every cache of this
    # process, tokens' included: applies are rare, and a token costs one lookup to reload.
    caches_clear()
    return [ApplyResult(spec.kind, spec.key, outcomes[index]) for index, spec in enumerate(specs)]


def experiment_transition(
    *, experiment: Experiment, status: str, actor: Actor, winning_variant: str | None = None
) -> ApplyResult:
    """Move an experiment along its lifecycle (the admin's start, declare winner, end and archive).

    The stored document with a new status (and winner) goes through the same reader
    and apply as any YAML, so the same rules refuse what is not allowed.
    """
    with transaction.atomic():
        # Locked before it is read: a change committed meanwhile must not be undone by this document.
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        document = resource_document(experiment)
        document["metadata"]["status"] = status
        document["spec"].pop("winningVariant", None)
        if winning_variant is not None:
            document["spec"]["winningVariant"] = winning_variant
        spec = resource_read(document, source=ADMIN_SOURCE)
        return resources_apply(specs=[spec], actor=actor)[0]
