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
from django.db.models import F
from django.db.models.functions import Lower
from django.utils import timezone

from assignments import gates
from assignments.models import (
    DEFAULT_LAB_ID,
    Assignment,
    Cohort,
    Experiment,
    Lab,
    ResourceChange,
    SubjectType,
    Variant,
)
from assignments.resources import (
    ExperimentSpec,
    LabSpec,
    ResourceInvalid,
    ResourceProblem,
    ResourceSpec,
    Source,
    SubjectTypeSpec,
    experiment_population,
    resource_document,
    resource_read,
    resources_check_unique,
)
from assignments.updating import cohort_change, model_update, same, variants_write
from core.cache import caches_clear

MODELS = {"subjecttype": SubjectType, "lab": Lab, "experiment": Experiment}
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


def _where(spec: ResourceSpec) -> str:
    return f"{spec.source}: {spec.kind} {spec.key!r}"


def _check_experiment_change(
    experiment: Experiment, spec: ExperimentSpec, subject_type: SubjectType
) -> list[ResourceProblem]:
    errors = []
    where = _where(spec)
    if not experiment.can_move_to(spec.status):
        errors.append(
            ResourceProblem(where, "metadata.status", f"cannot go back from {experiment.status} to {spec.status}")
        )
    has_assignments = Assignment.objects.filter(experiment=experiment).exists()
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


def _check_salt(experiment: Experiment | None, spec: ExperimentSpec) -> list[ResourceProblem]:
    """Salts are unique ignoring case: two experiments with one salt would draw the same numbers for every
    subject, so their variants and coverage would be correlated. Checked where a salt is set, so a database
    that already holds a shared salt keeps working until someone sets one."""
    salt = spec.effective_salt
    if experiment is not None and experiment.salt == salt:
        return []
    others = Experiment.objects.alias(lsalt=Lower("salt")).filter(lsalt=salt.lower())
    if experiment is not None:
        others = others.exclude(pk=experiment.pk)
    other = others.first()
    if other is None:
        return []
    message = (
        f"salt {salt!r} is the salt of experiment {other.key!r} already (salts are unique ignoring case: "
        "a shared salt correlates the experiments' draws); set another spec.salt"
    )
    return [ResourceProblem(_where(spec), "spec.salt", message)]


def _apply_experiment(spec: ExperimentSpec, errors: list[ResourceProblem]) -> str | None:
    where = _where(spec)
    lab = _get_ci(Lab, spec.lab)
    if lab is None and spec.lab.lower() == DEFAULT_LAB_ID:
        # `default` exists out of the box (migration 0002); a flushed database gets it back here.
        lab = Lab.objects.create(key=DEFAULT_LAB_ID, name=DEFAULT_LAB_ID)
    subject_type = _get_ci(SubjectType, spec.subject_type)
    if lab is None:
        errors.append(ResourceProblem(where, "metadata.parentId", f"no lab {spec.lab!r}"))
    if subject_type is None:
        errors.append(ResourceProblem(where, "spec.subjectType", f"no subject type {spec.subject_type!r}"))
    if lab is None or subject_type is None:
        return None
    experiment = _get_ci(Experiment, spec.key, for_update=True)
    created = experiment is None
    salt_problems = _check_salt(experiment, spec)
    if salt_problems:
        errors.extend(salt_problems)
        return None
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
        problems = _check_experiment_change(experiment, spec, subject_type)
        if problems:
            errors.extend(problems)
            return None
        old_allocation = (_stored_splits(experiment), experiment_population(experiment))
    targeting_problems = gates.targeting_problems(spec.targeting or [], subject_type.attribute_types())
    if targeting_problems:
        errors.extend(ResourceProblem(where, path, message) for path, message in targeting_problems)
        return None
    variants_changed, removed_variants = variants_write(experiment, spec.variants)
    new_allocation = ([(variant.key.lower(), variant.split) for variant in spec.variants], spec.population())
    if created:
        Cohort.objects.create(experiment=experiment, number=1, splits=spec.splits(), population=spec.population())
    elif not same(new_allocation, old_allocation):
        running = Experiment.status_rank(experiment.status) >= Experiment.status_rank(Experiment.Status.ACTIVE)
        cohort_change(experiment, running=running, splits=spec.splits(), population=spec.population())
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
    }
    if created:
        for name, value in values.items():
            setattr(experiment, name, value)
        experiment.save()
        return "created"
    if model_update(experiment, values):
        outcome = "updated"
    elif variants_changed:
        Experiment.objects.filter(pk=experiment.pk).update(
            resource_version=F("resource_version") + 1, updated_at=timezone.now()
        )
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
            errors.append(ResourceProblem(_where(spec), "spec.attributes", why))
        before = retyped_targeting.get(pk)
        if not problems and before is not None and same(targeting, before[0]):
            why = (
                f"retypes {', '.join(map(repr, before[1]))}, which experiment {key!r} targets: its conditions would "
                "select other subjects without a new cohort; change that experiment's targeting first, or in the "
                "same apply"
            )
            errors.append(ResourceProblem(_where(spec), "spec.attributes", why))
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


def _apply_one(
    spec: ResourceSpec, errors: list[ResourceProblem], actor: Actor, *, create_only: bool, check_versions: bool
) -> str | None:
    model = MODELS[spec.kind]
    stored = _get_ci(model, spec.key, for_update=True)
    if stored is not None and create_only:
        errors.append(
            ResourceProblem(_where(spec), "metadata.id", f"a {spec.kind} {stored.key!r} exists (IDs ignore case)")
        )
        return None
    if check_versions and stored is not None and spec.version is not None and spec.version != stored.resource_version:
        message = (
            f"changed by someone else since version {spec.version} was read (now version "
            f"{stored.resource_version}): reload to see the change, then edit again"
        )
        errors.append(ResourceProblem(_where(spec), "metadata.resourceVersion", message))
        return None
    before = None if stored is None else resource_document(stored, with_version=False)
    outcome = _apply_experiment(spec, errors) if isinstance(spec, ExperimentSpec) else _apply_plain(spec)
    if outcome in ("created", "updated"):
        _history_record(model, spec, before, actor)
    return outcome


def resources_apply(
    *,
    specs: list[ResourceSpec],
    actor: Actor,
    dry_run: bool = False,
    create_only: bool = False,
    check_versions: bool = False,
) -> list[ApplyResult]:
    """Apply every resource in one transaction, or none (ResourceInvalid lists why).

    Subject types and labs go first so experiments may refer to ones defined in
    the same apply. A dry run does all the work, then rolls it back. With
    `create_only` (the admin's add form) a resource that exists is refused
    rather than updated. With `check_versions` (the admin's change form) a spec
    read at another resourceVersion than the stored one is refused, so an edit
    made on a page opened before someone else's change cannot silently undo it;
    configuration as code applies whatever the file says.
    """
    resources_check_unique(specs)
    order = {"subjecttype": 0, "lab": 1, "experiment": 2}
    outcomes: dict[int, str] = {}
    errors: list[ResourceProblem] = []
    with transaction.atomic():
        retyped_targeting = {
            spec.key.lower(): _retyped_targeting(spec) for spec in specs if isinstance(spec, SubjectTypeSpec)
        }
        for index, spec in sorted(enumerate(specs), key=lambda item: order[item[1].kind]):
            outcome = _apply_one(spec, errors, actor, create_only=create_only, check_versions=check_versions)
            if outcome is not None:
                outcomes[index] = outcome
        applied = {spec.key.lower() for spec in specs if isinstance(spec, ExperimentSpec)}
        for spec in specs:
            if isinstance(spec, SubjectTypeSpec):
                errors.extend(_check_targeted_attributes(spec, applied, retyped_targeting[spec.key.lower()]))
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
