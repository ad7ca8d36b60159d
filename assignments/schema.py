"""The assignment endpoints' part of the OpenAPI description: the experiment status a 409 names."""

from __future__ import annotations

from drf_spectacular.plumbing import build_choice_field
from rest_framework import serializers

from assignments.models import Experiment

EXPERIMENT_STATUSES = Experiment.Status.values


def postprocess_schema(result: dict, generator, request, public) -> dict:
    """Declare `experiment_status` on the shared Problem body (core/api/schema.py), before `request_id`.

    Runs before drf-spectacular's enum hook, which names the enum ExperimentStatus (ENUM_NAME_OVERRIDES).
    """
    problem = result["components"]["schemas"]["Problem"]
    properties = problem["properties"]
    request_id = properties.pop("request_id")
    status = build_choice_field(serializers.ChoiceField(choices=EXPERIMENT_STATUSES))
    status["description"] = f"The experiment's status, on 409 only.\n\n{status['description']}"
    properties["experiment_status"] = status
    properties["request_id"] = request_id
    return result
