"""The configuration as documents: what export_resources writes, what the history records and what the
staff pages show, in the form resources.py reads back unchanged."""

from __future__ import annotations

from typing import Any

import yaml

from assignments.configuration import holdouts, layers
from assignments.configuration.document_reader import document_of
from assignments.configuration.resources import population_document
from assignments.models import Experiment, Lab, Layer, SubjectType
from assignments.selectors import value_as_typed
from assignments.slots import ranges_from


def _without_version(document: dict) -> dict:
    document["metadata"].pop("resourceVersion")
    return document


def resource_document(resource: SubjectType | Lab | Layer | Experiment, *, with_version: bool = True) -> dict:
    """The resource as the document export_resources writes; without its resourceVersion
    for the history, which records the version beside the document."""
    if isinstance(resource, SubjectType):
        document = _subject_type_document(resource)
    elif isinstance(resource, Lab):
        document = _lab_document(resource)
    elif isinstance(resource, Layer):
        document = layers.layer_document(resource)
    elif resource.kind == Experiment.Kind.HOLDOUT:
        document = holdouts.holdout_document(resource)
    else:
        document = _experiment_document(resource, holdouts.holdout_keys([resource]).get(resource.pk, []))
    return document if with_version else _without_version(document)


def resource_yaml(document: dict) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def _subject_type_document(subject_type: SubjectType) -> dict:
    spec = {"attributes": subject_type.attributes} if subject_type.attributes else None
    return document_of("subjecttype", subject_type, spec=spec, status=subject_type.status)


def _lab_document(lab: Lab) -> dict:
    return document_of("lab", lab)


def _experiment_document(experiment: Experiment, holdout_keys: list[str]) -> dict:
    """`holdout_keys`: the IDs of the holdouts covering it, in order (holdouts.holdout_keys)."""
    variants = []
    for variant in experiment.variants.all():
        item: dict[str, Any] = {"id": variant.key}
        if variant.name:
            item["name"] = variant.name
        if variant.description:
            item["description"] = variant.description
        item["control"] = variant.is_control
        item["split"] = variant.split
        if experiment.value_type:
            item["value"] = value_as_typed(experiment.value_type, variant.value)
        variants.append(item)
    spec: dict[str, Any] = {
        "subjectType": experiment.subject_type.key,
        "hypothesis": experiment.hypothesis,
        "salt": experiment.salt,
    }
    if experiment.winning_variant is not None:
        spec["winningVariant"] = experiment.winning_variant.key
    spec["followLinks"] = experiment.follow_links
    population = experiment_population(experiment)
    # The order of the YAML: enrollment, holdouts, layer, targeting, coverage.
    if "enrollment" in population:
        spec["enrollment"] = population.pop("enrollment")
    if holdout_keys:
        spec["holdouts"] = holdout_keys
    spec.update(population)
    # Each only when not its default, as coverage: a document without them exports without them.
    if experiment.value_type:
        spec["valueType"] = experiment.value_type
    if not experiment.bulk_evaluation:
        spec["bulkEvaluation"] = False
    spec["variants"] = variants
    return document_of("experiment", experiment, spec=spec, status=experiment.status, parentId=experiment.lab.key)


def experiment_population(experiment: Experiment) -> dict[str, Any]:
    """The experiment's gates as its spec holds them (and its current cohort records them)."""
    return population_document(
        start_at=experiment.enrollment_start_at,
        stop_at=experiment.enrollment_stop_at,
        layer=None if experiment.layer_id is None else (experiment.layer.key, ranges_from(experiment.slots)),
        targeting=experiment.targeting,
        coverage=experiment.coverage,
    )


def resources_export(*, kind: str | None = None) -> str:
    """The configuration as YAML that resources_parse and resources_apply accept unchanged."""
    documents: list[dict] = []
    if kind in (None, "subjecttype"):
        documents += [_subject_type_document(s) for s in SubjectType.objects.order_by("key")]
    if kind in (None, "lab"):
        documents += [_lab_document(lab) for lab in Lab.objects.order_by("key")]
    if kind in (None, "layer"):
        documents += [
            layers.layer_document(layer) for layer in Layer.objects.select_related("subject_type").order_by("key")
        ]
    if kind in (None, "holdout"):
        stored = (
            Experiment.objects.filter(kind=Experiment.Kind.HOLDOUT)
            .select_related("subject_type")
            .prefetch_related("variants")
            .order_by("key")
        )
        documents += [holdouts.holdout_document(holdout) for holdout in stored]
    if kind in (None, "experiment"):
        experiments = (
            Experiment.objects.filter(kind=Experiment.Kind.EXPERIMENT)
            .select_related("lab", "subject_type", "winning_variant", "layer")
            .prefetch_related("variants")
            .order_by("key")
        )
        keys = holdouts.holdout_keys(experiments)
        documents += [_experiment_document(experiment, keys.get(experiment.pk, [])) for experiment in experiments]
    return yaml.safe_dump_all(documents, sort_keys=False, allow_unicode=True, explicit_start=True)
