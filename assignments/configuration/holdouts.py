"""Holdouts as configuration (kind `holdout`, docs/reference/resources.md#kind-holdout), and the experiments'
`spec.holdouts`: reading, the document the export writes, the apply, and the binding by scope.

A holdout is stored as an Experiment of kind holdout whose variants are `held_out` (its share, the control:
its members see the product without the experiments it covers) and `general`, so that its memberships are
drawn, stored, exported and reported as any experiment's assignments are. Its lab is the default one: it
belongs to no lab, its scope names labs. Its share and salt drew its members, so they are fixed once it has
been active; an experiment's holdouts decided who entered it, so they are fixed once it has assignments.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.db.models.functions import Lower

from assignments import gates
from assignments.configuration.apply_writes import (
    cohort_change,
    lab_get_ci,
    model_update,
    resource_version_raise,
    variants_write,
)
from assignments.configuration.document_reader import (
    Reader,
    ResourceIdentity,
    ResourceInvalid,
    ResourceProblem,
    VariantSpec,
    document_of,
    read_metadata,
)
from assignments.configuration.experiment_groups import (
    Salted,
    group_values,
    members_problems,
    subject_type_problems,
)
from assignments.configuration.salts import salt_problems
from assignments.models import DEFAULT_LAB_ID, Cohort, Experiment, ExperimentHoldout, SubjectType

METADATA_FIELDS = {"id", "name", "description", "status", "resourceVersion"}
SPEC_FIELDS = {"subjectType", "share", "salt", "scope"}
SCOPE_FIELDS = {"labs"}
STATUSES = [Experiment.Status.DRAFT, Experiment.Status.ACTIVE, Experiment.Status.ENDED]
HELD_OUT = "held_out"
GENERAL = "general"
# More would hold out most subjects from every experiment it covers.
MAX_SHARE = 0.5
SCOPE_ALL = "all"


@dataclass(frozen=True, kw_only=True)
class HoldoutSpec(ResourceIdentity, Salted):
    status: str
    subject_type: str
    share: float
    salt: str | None
    # spec.scope as the document holds it: "all", {"labs": [lab IDs]}, or None (listed by experiments only).
    scope: str | dict[str, list[str]] | None

    kind = "holdout"

    def variants(self) -> tuple[VariantSpec, VariantSpec]:
        return (
            VariantSpec(key=HELD_OUT, name="", description="", is_control=True, split=self.share),
            VariantSpec(key=GENERAL, name="", description="", is_control=False, split=1 - self.share),
        )

    def splits(self) -> list[dict[str, Any]]:
        return [{"variant": variant.key, "split": variant.split} for variant in self.variants()]

    def scope_labs(self) -> list[str]:
        return self.scope["labs"] if isinstance(self.scope, dict) else []


def holdout_read(reader: Reader, document: dict) -> HoldoutSpec | None:
    metadata, identity = read_metadata(reader, document, METADATA_FIELDS)
    status = reader.choice(metadata, "status", "metadata", STATUSES, Experiment.Status.DRAFT)
    spec = reader.mapping(document.get("spec"), "spec", SPEC_FIELDS)
    subject_type = reader.resource_id(spec, "subjectType", "spec")
    share = spec.get("share")
    if not gates.is_number(share) or not 0 < share <= MAX_SHARE:
        reader.wrong("spec.share", share, f"a number more than 0 and at most {MAX_SHARE} (0.1 holds out 10 %)")
    salt = reader.salt(spec, "spec")
    scope = _scope_read(reader, spec.get("scope"))
    if reader.errors:
        return None
    return HoldoutSpec(**identity, status=status, subject_type=subject_type, share=float(share), salt=salt, scope=scope)


def _scope_read(reader: Reader, value: Any) -> str | dict[str, list[str]] | None:
    if value is None or value == SCOPE_ALL:
        return value
    if not isinstance(value, dict):
        reader.error("spec.scope", "must be all or {labs: [lab IDs]} (leave it out for none)")
        return None
    data = reader.mapping(value, "spec.scope", SCOPE_FIELDS)
    labs = reader.resource_ids(data.get("labs"), "spec.scope.labs", "lab")
    if labs is not None and not labs:
        reader.error("spec.scope.labs", "must list at least one lab (leave spec.scope out for none)")
    return {"labs": list(labs)} if labs else None


def holdout_document(holdout: Experiment) -> dict:
    spec: dict[str, Any] = {"subjectType": holdout.subject_type.key, "share": _share(holdout), "salt": holdout.salt}
    if holdout.scope is not None:
        spec["scope"] = holdout.scope
    return document_of("holdout", holdout, spec=spec, status=holdout.status)


def _share(holdout: Experiment) -> float:
    # Through all(): the export prefetches the variants.
    return next(variant.split for variant in holdout.variants.all() if variant.is_control)


def holdout_apply(spec: HoldoutSpec) -> str:
    """Create or update the holdout: "created", "updated" or "unchanged"; ResourceInvalid when refused."""
    where = spec.where
    subject_type, problems = subject_type_problems(spec.subject_type, where)
    for index, lab in enumerate(spec.scope_labs()):
        if lab_get_ci(lab) is None:
            problems.append(ResourceProblem(where, f"spec.scope.labs.{index}", f"no lab {lab!r}"))
    holdout = Experiment.objects.select_for_update().get_ci(spec.key)
    problems += salt_problems(salt=spec.effective_salt, own=holdout, where=where)
    if holdout is not None:
        problems += _change_problems(holdout, spec, subject_type, where)
    if problems:
        raise ResourceInvalid(problems)
    values = {**group_values(spec, subject_type), "status": spec.status, "scope": spec.scope}
    if holdout is None:
        holdout = Experiment.objects.create(kind=Experiment.Kind.HOLDOUT, lab=lab_get_ci(DEFAULT_LAB_ID), **values)
        variants_write(holdout, spec.variants())
        Cohort.objects.create(experiment=holdout, number=1, splits=spec.splits())
        return "created"
    variants_changed, _ = variants_write(holdout, spec.variants())
    if variants_changed:
        # Only a draft's share may change (_change_problems): no one was drawn, cohort 1 is corrected.
        cohort_change(holdout, running=False, splits=spec.splits(), population={})
    if model_update(holdout, values):
        return "updated"
    if variants_changed:
        resource_version_raise(holdout)
        return "updated"
    return "unchanged"


def _change_problems(
    holdout: Experiment, spec: HoldoutSpec, subject_type: SubjectType | None, where: str
) -> list[ResourceProblem]:
    problems = []
    if not holdout.can_move_to(spec.status):
        message = f"cannot go back from {holdout.status} to {spec.status}"
        problems.append(ResourceProblem(where, "metadata.status", message))
    if holdout.status == Experiment.Status.DRAFT:
        return problems
    drawn = "once the holdout has been active: its members were drawn with it"
    share = _share(holdout)
    if spec.share != share:
        problems.append(ResourceProblem(where, "spec.share", f"cannot change {drawn} (share {share})"))
    if spec.effective_salt != holdout.salt:
        problems.append(ResourceProblem(where, "spec.salt", f"cannot change {drawn}"))
    if subject_type is not None and subject_type.pk != holdout.subject_type_id:
        problems.append(ResourceProblem(where, "spec.subjectType", f"cannot change {drawn}"))
    return problems


def holdout_members_problems(spec: HoldoutSpec, applied: Collection[str]) -> list[ResourceProblem]:
    """After the apply: experiments the holdout covers whose subject type is no longer the holdout's. Those
    whose documents were in the apply (`applied`: their IDs in lower case) were checked against it already."""
    holdout = Experiment.objects.get_ci(spec.key)
    return members_problems(
        spec,
        holdout,
        Experiment.objects.filter(pk__in=ExperimentHoldout.objects.filter(holdout=holdout).values("experiment")),
        applied,
        lambda key, subject_type: (
            f"it covers experiment {key!r}, of subject type {subject_type!r}: a holdout covers experiments of its "
            "subject type only; change that experiment's spec.holdouts first, or in the same apply"
        ),
    )


def holdouts_resolve(
    keys: tuple[str, ...] | None, subject_type: SubjectType, where: str
) -> tuple[list[Experiment] | None, list[ResourceProblem]]:
    """The stored holdouts an experiment of `subject_type` lists in spec.holdouts, in order (None when it
    leaves the field out), and the problems that refuse them."""
    if keys is None:
        return None, []
    holdouts, problems = [], []
    for index, key in enumerate(keys):
        path = f"spec.holdouts.{index}"
        holdout = Experiment.objects.select_related("subject_type").get_ci(key)
        if holdout is None or holdout.kind != Experiment.Kind.HOLDOUT:
            found = "" if holdout is None else f" ({holdout.key!r} is an experiment)"
            problems.append(ResourceProblem(where, path, f"no holdout {key!r}{found}"))
        elif holdout.subject_type_id != subject_type.pk:
            problems.append(ResourceProblem(where, path, _other_type(holdout, subject_type)))
        else:
            holdouts.append(holdout)
    return holdouts, problems


def _other_type(holdout: Experiment, subject_type: SubjectType) -> str:
    return (
        f"holdout {holdout.key!r} is of subject type {holdout.subject_type.key!r}, the experiment of "
        f"{subject_type.key!r}: a holdout covers experiments of its subject type only"
    )


def holdouts_stored(experiment: Experiment) -> list[Experiment]:
    """The holdouts covering the experiment, in the order of its spec.holdouts."""
    rows = ExperimentHoldout.objects.filter(experiment=experiment).select_related("holdout__subject_type")
    return [row.holdout for row in rows.order_by("position")]


def holdouts_kept_problems(kept: list[Experiment], subject_type: SubjectType, where: str) -> list[ResourceProblem]:
    """Why an experiment of `subject_type` that leaves spec.holdouts out cannot keep the holdouts it has."""
    return [
        ResourceProblem(where, "spec.subjectType", f"{_other_type(holdout, subject_type)}; list the holdouts to keep")
        for holdout in kept
        if holdout.subject_type_id != subject_type.pk
    ]


def holdouts_fixed_problems(
    stored: list[Experiment], listed: list[Experiment] | None, where: str
) -> list[ResourceProblem]:
    """Why an experiment that has assignments cannot take the holdouts listed: they decided who entered it,
    so a document may leave spec.holdouts out (keeping them) or list exactly them."""
    if listed is None or [holdout.pk for holdout in listed] == [holdout.pk for holdout in stored]:
        return []
    exactly = "[" + ", ".join(holdout.key for holdout in stored) + "]"
    message = (
        f"fixed once the experiment has assignments: leave spec.holdouts out, or list exactly {exactly} in this order"
    )
    return [ResourceProblem(where, "spec.holdouts", message)]


def holdouts_in_scope(subject_type: SubjectType, lab_key: str) -> list[Experiment]:
    """The active holdouts of the subject type whose scope takes in an experiment of the lab: `all`, or the
    lab listed (ignoring case); by ID ignoring case."""
    holdouts = Experiment.objects.filter(
        kind=Experiment.Kind.HOLDOUT,
        status=Experiment.Status.ACTIVE,
        subject_type=subject_type,
        scope__isnull=False,
    ).order_by(Lower("key"))
    return [
        holdout
        for holdout in holdouts
        if holdout.scope == SCOPE_ALL or lab_key.lower() in {lab.lower() for lab in holdout.scope["labs"]}
    ]


def holdouts_write(experiment: Experiment, holdouts: Iterable[Experiment]) -> bool:
    """Store the experiment's holdouts in this order; whether that changed them."""
    wanted = [holdout.pk for holdout in holdouts]
    rows = ExperimentHoldout.objects.filter(experiment=experiment)
    if list(rows.order_by("position").values_list("holdout_id", flat=True)) == wanted:
        return False
    rows.delete()
    ExperimentHoldout.objects.bulk_create(
        ExperimentHoldout(experiment=experiment, holdout_id=pk, position=position) for position, pk in enumerate(wanted)
    )
    return True


def holdout_keys(experiments: QuerySet | list[Experiment]) -> dict[int, list[str]]:
    """Experiment primary key -> the IDs of the holdouts covering it in order, for those that have any."""
    keys: dict[int, list[str]] = {}
    rows = ExperimentHoldout.objects.filter(experiment__in=experiments).order_by("experiment", "position")
    for experiment_pk, key in rows.values_list("experiment_id", "holdout__key"):
        keys.setdefault(experiment_pk, []).append(key)
    return keys
