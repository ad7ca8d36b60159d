"""The assignment endpoints' part of the OpenAPI description: the experiment status a 409 names, and the
attributes the gates decide on (assignments/gates.py)."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import build_choice_field
from rest_framework import serializers

from assignments import gates
from assignments.models import Experiment

EXPERIMENT_STATUSES = Experiment.Status.values

ATTRIBUTES_HELP = (
    f"0 to {gates.MAX_ATTRIBUTES} entries; keys match `{gates.ATTRIBUTE_NAME_PATTERN}`; values are strings (at most "
    f"{gates.ATTRIBUTE_STRING_MAX_LENGTH} characters, no control characters), finite numbers or booleans, of the "
    "type the subject type declares for that name (undeclared names are accepted and ignored). Targeting decides "
    "on them; they are never stored or logged."
)
EXCLUDED_HELP = (
    "Subject ID to the reason a gate kept it out (it got the control and nothing was stored): "
    + ", ".join(f"`{reason}`" for reason in gates.REASONS)
    + ". Present only when a subject was excluded."
)


def _attribute_object_schema(description: str) -> dict:
    return {
        "type": "object",
        "maxProperties": gates.MAX_ATTRIBUTES,
        "additionalProperties": {
            "oneOf": [
                {"type": "string", "maxLength": gates.ATTRIBUTE_STRING_MAX_LENGTH},
                {"type": "number"},
                {"type": "boolean"},
            ]
        },
        "description": description,
    }


class AttributesFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "assignments.api.AttributesField"

    def map_serializer_field(self, auto_schema, direction):
        return _attribute_object_schema(self.target.help_text)


class SubjectAttributesFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "assignments.api.SubjectAttributesField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "type": "object",
            "maxProperties": settings.ASSIGNMENT_MAX_SUBJECTS,
            "additionalProperties": _attribute_object_schema("One subject's attributes."),
            "description": self.target.help_text,
        }


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
