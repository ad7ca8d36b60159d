"""Layers as configuration (kind `layer`, docs/reference/resources.md#kind-layer), and the experiments'
`spec.layer`: reading, the document the export writes, the apply, and the rules between them.

A layer has a subject type and a salt, which draws each subject's slot (slots.py). Each experiment of the
layer owns slot ranges of it; the slots of a layer's active experiments never overlap, so a subject enters
one of them at most (gates.py, gate 3). An experiment that has assignments keeps its layer and may only grow
its slots: its subjects were assigned from the slots it owned.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models.functions import Lower

from assignments.configuration.apply_writes import model_update
from assignments.configuration.document_reader import (
    Reader,
    ResourceIdentity,
    ResourceInvalid,
    ResourceProblem,
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
from assignments.models import Assignment, Experiment, Layer, SubjectType
from assignments.slots import Ranges, grows, overlap, ranges_from, ranges_problems

METADATA_FIELDS = {"id", "name", "description", "resourceVersion"}
SPEC_FIELDS = {"subjectType", "salt"}
PLACEMENT_FIELDS = {"id", "slots"}


@dataclass(frozen=True, kw_only=True)
class LayerSpec(ResourceIdentity, Salted):
    subject_type: str
    salt: str | None

    kind = "layer"


@dataclass(frozen=True)
class Placement:
    """An experiment's spec.layer: the layer's ID as written, and the slot ranges it owns in ascending order
    (the order carries no meaning: written in another, the same ranges are no change)."""

    layer: str
    slots: Ranges


def slots_document(slots: Ranges) -> list[list[int]]:
    """Slot ranges as the YAML and the database write them."""
    return [[start, end] for start, end in slots]


def ranges_text(slots: Ranges) -> str:
    return "[" + ", ".join(f"[{start}, {end}]" for start, end in slots) + "]"


def layer_read(reader: Reader, document: dict) -> LayerSpec | None:
    _, identity = read_metadata(reader, document, METADATA_FIELDS)
    spec = reader.mapping(document.get("spec"), "spec", SPEC_FIELDS)
    subject_type = reader.resource_id(spec, "subjectType", "spec")
    salt = reader.salt(spec, "spec")
    if reader.errors:
        return None
    return LayerSpec(**identity, subject_type=subject_type, salt=salt)


def placement_read(reader: Reader, value: Any) -> Placement | None:
    """An experiment's spec.layer, {id, slots}; None when it is left out (or wrong: then said so)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        reader.error("spec.layer", "must be a mapping {id, slots}")
        return None
    data = reader.mapping(value, "spec.layer", PLACEMENT_FIELDS)
    key = reader.resource_id(data, "id", "spec.layer")
    problems = ranges_problems(data.get("slots"))
    for problem in problems:
        # ranges_problems starts the message of a range's own problem with the range's index.
        index, separator, message = problem.partition(": ")
        if separator and index.isdigit():
            reader.error(f"spec.layer.slots.{index}", message)
        else:
            reader.error("spec.layer.slots", problem)
    if key is None or problems:
        return None
    return Placement(layer=key, slots=tuple(sorted(ranges_from(data["slots"]))))


def layer_document(layer: Layer) -> dict:
    return document_of("layer", layer, spec={"subjectType": layer.subject_type.key, "salt": layer.salt})


def layer_apply(spec: LayerSpec) -> str:
    """Create or update the layer: "created", "updated" or "unchanged"; ResourceInvalid when refused."""
    where = spec.where
    subject_type, problems = subject_type_problems(spec.subject_type, where)
    if problems:
        raise ResourceInvalid(problems)
    layer = Layer.objects.select_for_update().get_ci(spec.key)
    problems = salt_problems(salt=spec.effective_salt, own=layer, where=where)
    if (
        layer is not None
        and spec.effective_salt != layer.salt
        and Assignment.objects.filter(experiment__layer=layer).exists()
    ):
        message = "cannot change once an experiment of the layer has assignments (it drew their slots)"
        problems.append(ResourceProblem(where, "spec.salt", message))
    if problems:
        raise ResourceInvalid(problems)
    values = group_values(spec, subject_type)
    if layer is None:
        Layer.objects.create(**values)
        return "created"
    return "updated" if model_update(layer, values) else "unchanged"


def placement_resolve(
    placement: Placement | None, subject_type: SubjectType, where: str
) -> tuple[Layer | None, list[ResourceProblem]]:
    """The stored layer an experiment of `subject_type` names in spec.layer (None for none), and the problems
    that refuse it."""
    if placement is None:
        return None, []
    layer = Layer.objects.select_related("subject_type").get_ci(placement.layer)
    if layer is None:
        return None, [ResourceProblem(where, "spec.layer.id", f"no layer {placement.layer!r}")]
    if layer.subject_type_id != subject_type.pk:
        message = (
            f"layer {layer.key!r} is of subject type {layer.subject_type.key!r}, the experiment of "
            f"{subject_type.key!r}: a layer's experiments share its subject type"
        )
        return None, [ResourceProblem(where, "spec.layer.id", message)]
    return layer, []


def placement_fixed_problems(
    experiment: Experiment, placement: Placement | None, layer: Layer | None, where: str
) -> list[ResourceProblem]:
    """Why an experiment that has assignments cannot take this spec.layer: its subjects were assigned from
    the slots it owned, so it keeps its layer (or its having none) and may only add slots."""
    if experiment.layer_id is None:
        if layer is None:
            return []
        message = (
            "cannot be added once the experiment has assignments: its subjects were assigned from every slot, "
            "and would share the layer's slots with its other experiments"
        )
        return [ResourceProblem(where, "spec.layer", message)]
    stored = ranges_from(experiment.slots)
    owned = f"it owns the slots {ranges_text(stored)} of layer {experiment.layer.key!r}"
    if layer is None:
        message = f"cannot be removed once the experiment has assignments ({owned})"
        return [ResourceProblem(where, "spec.layer", message)]
    if layer.pk != experiment.layer_id:
        message = f"cannot change once the experiment has assignments ({owned})"
        return [ResourceProblem(where, "spec.layer.id", message)]
    if not grows(stored, placement.slots):
        message = (
            f"may only grow once the experiment has assignments: {ranges_text(placement.slots)} does not own every "
            f"slot of {ranges_text(stored)}"
        )
        return [ResourceProblem(where, "spec.layer.slots", message)]
    return []


def layer_members_problems(spec: LayerSpec, applied: Collection[str]) -> list[ResourceProblem]:
    """After the apply: experiments of the layer whose subject type is no longer the layer's. Those whose
    documents were in the apply (`applied`: their IDs in lower case) were checked against it already."""
    layer = Layer.objects.get_ci(spec.key)
    return members_problems(
        spec,
        layer,
        Experiment.objects.filter(layer=layer),
        applied,
        lambda key, subject_type: (
            f"experiment {key!r} of the layer is of subject type {subject_type!r}: a layer's experiments share its "
            "subject type; move them to it first, or in the same apply"
        ),
    )


def overlaps_problems(applied: Mapping[str, tuple[int, str]], refused: Collection[str]) -> list[ResourceProblem]:
    """After the apply: the pairs of active experiments whose slots in one layer overlap, at least one of them
    applied and neither refused. `applied` maps the ID in lower case of each experiment applied to its place in
    the apply and where its document is, `refused` holds the IDs in lower case of the experiments whose documents
    were refused; each pair is refused once, at the later document of the two.

    The state after the whole apply is what counts, so one apply may end an experiment and give its slots
    to another, or move slots from one experiment to another.
    """
    touched = Experiment.objects.alias(lkey=Lower("key")).filter(lkey__in=applied, layer__isnull=False)
    active = (
        Experiment.objects.filter(status=Experiment.Status.ACTIVE, layer__in=touched.values("layer"))
        .alias(lkey=Lower("key"))
        .exclude(lkey__in=refused)
        .order_by("layer", "key")
        .values_list("layer__key", "key", "slots")
    )
    problems = []
    for layer, members in itertools.groupby(active, key=lambda row: row[0]):
        for (_, first, first_slots), (_, second, second_slots) in itertools.combinations(members, 2):
            ranges = overlap(ranges_from(first_slots), ranges_from(second_slots))
            first_place, second_place = applied.get(first.lower()), applied.get(second.lower())
            if ranges is None or (first_place is None and second_place is None):
                continue
            if second_place is None or (first_place is not None and first_place > second_place):
                (_, where), other = first_place, second
            else:
                (_, where), other = second_place, first
            message = (
                f"overlaps active experiment {other!r} on the slots [{ranges[0]}, {ranges[1]}] of layer {layer!r}: "
                "the slots of a layer's active experiments never overlap"
            )
            problems.append(ResourceProblem(where, "spec.layer.slots", message))
    return problems
