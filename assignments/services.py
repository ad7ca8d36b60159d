"""Writes: the assignment hot path and the apply of configuration resources."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.db.models.functions import Lower
from django.utils import timezone

from assignments.errors import ExperimentNotActive, ExperimentNotFound
from assignments.models import DEFAULT_LAB_ID, Assignment, Cohort, Experiment, Lab, SubjectType, Variant
from assignments.resources import (
    ExperimentSpec,
    LabSpec,
    ResourceInvalid,
    ResourceSpec,
    SubjectTypeSpec,
    resources_check_unique,
)
from assignments.selectors import ExperimentState, experiment_states, experiment_version_get
from assignments.storage import assignments_fetch, assignments_insert


def _current_state(experiment_id: str, *, fresh: bool) -> ExperimentState:
    if fresh:
        experiment_states.forget(experiment_id)
    state = experiment_states.get(experiment_id)
    if state is None:
        raise ExperimentNotFound(f"No experiment has the ID {experiment_id!r}.")
    return state


def _stored_variants(state: ExperimentState, subject_ids: list[str], *, fresh: bool) -> dict[str, int] | None:
    """Every subject's stored variant pk, creating the missing assignments; None if
    a cached state turned out to be stale (nothing was written then).

    At most three statements: read the existing (with the experiment's version),
    insert the missing (ignoring conflicts on assignment_experiment_subject_unique),
    and, only if a concurrent request won some of those conflicts, read the rows it stored.
    """
    version, stored = assignments_fetch(experiment_pk=state.pk, subject_ids=subject_ids)
    if not fresh and version != state.version:
        return None
    missing = sorted(subject_id for subject_id in subject_ids if subject_id not in stored)
    if not missing:
        return stored
    rows = [(subject_id, state.variant_pk_for(subject_id)) for subject_id in missing]
    inserted = assignments_insert(experiment_pk=state.pk, cohort=state.cohort, rows=rows, created_at=timezone.now())
    stored.update(inserted)
    lost = [subject_id for subject_id in missing if subject_id not in inserted]
    if lost:
        stored.update(assignments_fetch(experiment_pk=state.pk, subject_ids=lost)[1])
    return stored


def _assign(experiment_id: str, subject_ids: list[str], *, fresh: bool) -> dict[str, str] | None:
    """The answer from the cached (or, if fresh, a newly loaded) state; None if that state is stale."""
    state = _current_state(experiment_id, fresh=fresh)
    if state.status != Experiment.Status.ACTIVE:
        # Not a hot path for long: experiments leave these statuses rarely, so one
        # primary-key read to confirm the cached status is cheap insurance.
        if not fresh and experiment_version_get(experiment_pk=state.pk) != state.version:
            return None
        if state.status != Experiment.Status.WINNER_DECLARED:
            raise ExperimentNotActive(
                f"Experiment {state.key!r} is {state.status}; only active experiments assign subjects.",
                experiment_status=state.status,
            )
        winner = state.variant_keys[state.winning_variant_pk]
        return {subject_id: winner for subject_id in subject_ids}
    stored = _stored_variants(state, subject_ids, fresh=fresh)
    if stored is None:
        return None
    if not all(variant_pk in state.variant_keys for variant_pk in stored.values()):
        # An apply committed since our fetch added a variant another process already assigned.
        state = _current_state(experiment_id, fresh=True)
    return {subject_id: state.variant_keys[stored[subject_id]] for subject_id in subject_ids}


def assign_subjects(*, experiment_id: str, subject_ids: Sequence[str]) -> dict[str, str]:
    """Each distinct subject's variant ID, in the order first sent (CONTRACT.md section 3).

    Active: stored assignments win; missing ones are computed (hashing.py) and
    stored. Winner declared: the winner for everyone, nothing stored.
    The experiment's state comes from a per-process cache that is checked against
    the stored resource_version on every request, so an apply by any process is
    seen by the next request.
    """
    distinct = list(dict.fromkeys(subject_ids))
    try:
        answer = _assign(experiment_id, distinct, fresh=False)
    except IntegrityError:
        # The cached state named a variant that a concurrent apply has since
        # removed, and the foreign key refused it: nothing was stored.
        answer = None
    if answer is None:
        # A state loaded now is current: an apply committing from here on is
        # ordered after this request, so it is not checked again.
        answer = _assign(experiment_id, distinct, fresh=True)
    return answer


@dataclass(frozen=True)
class ApplyResult:
    kind: str
    key: str
    outcome: str  # created | updated | unchanged

    def __str__(self) -> str:
        return f"{self.kind} {self.key}: {self.outcome}"


def _get_ci(model, key: str, *, for_update: bool = False):
    queryset = model.objects.alias(lkey=Lower("key")).filter(lkey=key.lower())
    if for_update:
        queryset = queryset.select_for_update()
    return queryset.first()


def _save_fields(instance, values: dict[str, Any]) -> bool:
    """Set changed fields and bump resource_version; False when nothing changed."""
    changed = [name for name, value in values.items() if getattr(instance, name) != value]
    if not changed:
        return False
    for name in changed:
        setattr(instance, name, values[name])
    instance.resource_version += 1
    instance.updated_at = timezone.now()
    instance.save(update_fields=[*changed, "resource_version", "updated_at"])
    return True


def _apply_plain(spec: SubjectTypeSpec | LabSpec) -> str:
    model = SubjectType if isinstance(spec, SubjectTypeSpec) else Lab
    values: dict[str, Any] = {"key": spec.key, "name": spec.name, "description": spec.description}
    if isinstance(spec, SubjectTypeSpec):
        values["status"] = spec.status
    instance = _get_ci(model, spec.key, for_update=True)
    if instance is None:
        model.objects.create(**values)
        return "created"
    return "updated" if _save_fields(instance, values) else "unchanged"


def _stored_splits(experiment: Experiment) -> list[tuple[str, float]]:
    return [(variant.key.lower(), variant.split) for variant in experiment.variants.order_by("position")]


def _check_experiment_change(experiment: Experiment, spec: ExperimentSpec, subject_type: SubjectType) -> list[str]:
    errors = []
    where = f"{spec.source}: experiment {spec.key!r}"
    if not experiment.can_move_to(spec.status):
        errors.append(f"{where}: metadata.status: cannot go back from {experiment.status} to {spec.status}")
    has_assignments = Assignment.objects.filter(experiment=experiment).exists()
    if has_assignments and subject_type.pk != experiment.subject_type_id:
        errors.append(f"{where}: spec.subjectType: cannot change once the experiment has assignments")
    if has_assignments and spec.effective_salt != experiment.salt:
        errors.append(f"{where}: spec.salt: cannot change once the experiment has assignments")
    kept = {variant.key.lower() for variant in spec.variants}
    for variant in experiment.variants.all():
        if variant.key.lower() not in kept and Assignment.objects.filter(variant=variant).exists():
            errors.append(f"{where}: spec.variants: variant {variant.key!r} has assignments and cannot be removed")
    return errors


def _write_variants(experiment: Experiment, spec: ExperimentSpec) -> tuple[bool, list[int]]:
    """Create and update the spec's variants; returns whether anything changed and the
    primary keys of the stored variants the spec drops, for the caller to delete once the
    experiment no longer names one of them as its winner (Experiment.winning_variant protects it)."""
    stored = {variant.key.lower(): variant for variant in experiment.variants.all()}
    wanted = {variant.key.lower() for variant in spec.variants}
    removed = [variant.pk for key, variant in stored.items() if key not in wanted]
    changed = bool(removed)
    # variant_one_control_per_experiment is checked per row, and a dropped control is still
    # stored until the end: clear the old control first.
    stored_control = next((key for key, variant in stored.items() if variant.is_control), None)
    control_moves = stored_control != next(v.key.lower() for v in spec.variants if v.is_control)
    if control_moves:
        Variant.objects.filter(experiment=experiment, is_control=True).update(is_control=False)
        for variant in stored.values():
            variant.is_control = False
    for position, variant_spec in enumerate(spec.variants):
        values = {
            "key": variant_spec.key,
            "name": variant_spec.name,
            "description": variant_spec.description,
            "position": position,
            "is_control": variant_spec.is_control,
            "split": variant_spec.split,
        }
        variant = stored.get(variant_spec.key.lower())
        if variant is None:
            Variant.objects.create(experiment=experiment, **values)
            changed = True
            continue
        updates = [name for name, value in values.items() if getattr(variant, name) != value]
        if updates:
            for name in updates:
                setattr(variant, name, values[name])
            variant.save(update_fields=updates)
            changed = True
    return changed or control_moves, removed


def _apply_experiment(spec: ExperimentSpec, errors: list[str]) -> str | None:
    where = f"{spec.source}: experiment {spec.key!r}"
    lab = _get_ci(Lab, spec.lab)
    if lab is None and spec.lab.lower() == DEFAULT_LAB_ID:
        # `default` exists out of the box (migration 0002); a flushed database gets it back here.
        lab = Lab.objects.create(key=DEFAULT_LAB_ID, name=DEFAULT_LAB_ID)
    subject_type = _get_ci(SubjectType, spec.subject_type)
    if lab is None:
        errors.append(f"{where}: metadata.parentId: no lab {spec.lab!r}")
    if subject_type is None:
        errors.append(f"{where}: spec.subjectType: no subject type {spec.subject_type!r}")
    if lab is None or subject_type is None:
        return None
    experiment = _get_ci(Experiment, spec.key, for_update=True)
    created = experiment is None
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
        old_splits = None
    else:
        problems = _check_experiment_change(experiment, spec, subject_type)
        if problems:
            errors.extend(problems)
            return None
        old_splits = _stored_splits(experiment)
    variants_changed, removed_variants = _write_variants(experiment, spec)
    new_splits = [(variant.key.lower(), variant.split) for variant in spec.variants]
    if created:
        Cohort.objects.create(experiment=experiment, number=1, splits=spec.splits())
    elif new_splits != old_splits:
        cohorts = Cohort.objects.filter(experiment=experiment)
        if Experiment.status_rank(experiment.status) >= Experiment.status_rank(Experiment.Status.ACTIVE):
            number = (cohorts.aggregate(Max("number"))["number__max"] or 0) + 1
            Cohort.objects.create(experiment=experiment, number=number, splits=spec.splits())
        else:
            # A draft has never assigned anyone: its first cohort is simply corrected.
            cohorts.filter(number=1).update(splits=spec.splits())
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
    }
    if created:
        for name, value in values.items():
            setattr(experiment, name, value)
        experiment.save()
        return "created"
    if _save_fields(experiment, values):
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


def resources_apply(*, specs: list[ResourceSpec], dry_run: bool = False) -> list[ApplyResult]:
    """Apply every resource in one transaction, or none (ResourceInvalid lists why).

    Subject types and labs go first so experiments may refer to ones defined in
    the same apply. A dry run does all the work, then rolls it back.
    """
    resources_check_unique(specs)
    order = {"subjecttype": 0, "lab": 1, "experiment": 2}
    outcomes: dict[int, str] = {}
    errors: list[str] = []
    with transaction.atomic():
        for index, spec in sorted(enumerate(specs), key=lambda item: order[item[1].kind]):
            outcome = _apply_experiment(spec, errors) if isinstance(spec, ExperimentSpec) else _apply_plain(spec)
            if outcome is not None:
                outcomes[index] = outcome
        if errors:
            transaction.set_rollback(True)
            raise ResourceInvalid(errors)
        if dry_run:
            transaction.set_rollback(True)
    # Answer from the new state in this process at once; others see it within the cache's lifetime.
    experiment_states.clear()
    return [ApplyResult(spec.kind, spec.key, outcomes[index]) for index, spec in enumerate(specs)]
