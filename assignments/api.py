"""POST /experiment-assignments and POST /assignments, the two ways to ask for assignments, and POST /id-link
served with this app's subject types."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers

from assignments import gates
from assignments.assigning import Unassigned, assign_subject_steps, assign_subjects_steps
from assignments.openapi import ATTRIBUTES_HELP, EXCLUDED_HELP
from assignments.selectors import subject_types_active_steps
from assignments.storage import storage_vendor
from core.api.fields import (
    IdentifierMapField,
    StrictBooleanField,
    StrictField,
    StrictStringField,
    StringListField,
    SubjectIdListField,
)
from core.api.schema import TOKEN_PROBLEMS, ProblemDoc, problem_responses
from core.api.views import JsonApiView, RequestBody
from core.middleware.requestlog import request_log_note
from core.steps import Steps
from idlinks.api import IdLinkApi as LinkApi
from tokens.authentication import IsProxyRole

# Longer than any resource ID, so that a long unknown ID is still answered 404 experiment_not_found.
EXPERIMENT_ID_MAX_LENGTH = 1000
MAX_IDENTIFIERS = 10
MAX_EXPERIMENTS = 100


# The two endpoints take attributes in two shapes; a body in the other's shape is told which this one wants.
KEYED_BY_SUBJECT = 'here attributes are keyed by subject ID: {"u1": {"country": "DE"}}'
ONE_OBJECT = 'here attributes are one object for this subject: {"country": "DE"}'


def _attribute_object_errors(data: object, shape: str) -> dict | list | None:
    """The errors of one attribute object, keyed by attribute name; None when it is valid. `shape` says
    what the endpoint wants where a value's shape suggests the other endpoint's."""
    if not isinstance(data, dict):
        return [f"must be an object of attribute names to values ({shape})"]
    if len(data) > gates.MAX_ATTRIBUTES:
        return [f"must have at most {gates.MAX_ATTRIBUTES} entries, got {len(data)}"]
    errors = {}
    for name, value in data.items():
        problem = gates.attribute_problem(name, value)
        if problem and gates.is_attribute_name(name) and isinstance(value, (dict, list)):
            problem = f"{problem} ({shape})"
        if problem:
            errors[name] = [problem]
    return errors or None


class AttributesField(StrictField):
    """One subject's attributes (POST /assignments): errors read `attributes.country`."""

    def to_internal_value(self, data):
        errors = _attribute_object_errors(data, ONE_OBJECT)
        if errors:
            raise serializers.ValidationError(errors)
        return data


class SubjectAttributesField(StrictField):
    """Subject ID -> attributes (POST /experiment-assignments): errors read `attributes.u1.country`.
    Whether every key is one of `subject_ids` is the serializer's to check."""

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an object of subject IDs to attribute objects")
        if len(data) > settings.ASSIGNMENT_MAX_SUBJECTS:
            raise serializers.ValidationError(
                f"must have at most {settings.ASSIGNMENT_MAX_SUBJECTS} entries, got {len(data)}"
            )
        errors = {}
        for subject_id, attributes in data.items():
            problem = _attribute_object_errors(attributes, KEYED_BY_SUBJECT)
            if problem:
                errors[subject_id] = problem
        if errors:
            raise serializers.ValidationError(errors)
        return data


INCLUDE_VALUES_HELP = (
    "true: the answer adds `values`, each variant's value (its ID when the experiment has no value type)."
)


def _value_field() -> serializers.JSONField:
    """A variant's value in an answer: any JSON value of the experiment's value type."""
    return serializers.JSONField(help_text="The variant's value: a string, boolean, integer, float or object.")


EXPERIMENT_NOT_FOUND = ProblemDoc(
    "No experiment has that ID.",
    "experiment_not_found",
    "Experiment not found",
    "No experiment has the ID 'checkout'.",
)


class ExperimentAssignmentsApi(JsonApiView):
    permission_classes = [IsProxyRole]
    vendor = staticmethod(storage_vendor)

    @extend_schema_serializer(component_name="ExperimentAssignmentsRequest")
    class InputSerializer(serializers.Serializer):
        experiment_id = StrictStringField(max_length=EXPERIMENT_ID_MAX_LENGTH)
        subject_ids = SubjectIdListField()
        attributes = SubjectAttributesField(
            required=False,
            help_text="Subject ID (one of `subject_ids`) to that subject's attributes. " + ATTRIBUTES_HELP,
        )
        include_values = StrictBooleanField(default=False, help_text=INCLUDE_VALUES_HELP)

        def validate(self, data):
            attributes = data.get("attributes")
            if attributes:
                asked = set(data["subject_ids"])
                unknown = {
                    key: [f"is not one of subject_ids ({KEYED_BY_SUBJECT})"] for key in attributes if key not in asked
                }
                if unknown:
                    raise serializers.ValidationError({"attributes": unknown})
            return data

    body = RequestBody(InputSerializer)

    @extend_schema(
        operation_id="experiment_assignments",
        summary="Get or make the subjects' assignments in one experiment",
        description="Roles: `proxy`, `admin`. Active: stored assignments are returned; for missing ones the "
        "experiment's gates (enrollment window, targeting on `attributes`, coverage) decide, then they are made "
        "and stored; a subject a gate keeps out gets the control, is listed in `excluded`, and nothing is stored "
        "for it. Winner declared: the winner for everyone the targeting lets in, the control (listed in "
        "`excluded`) for the others; nothing stored.",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "Two subjects",
                value={"experiment_id": "checkout-button", "subject_ids": ["u1", "u2"]},
                request_only=True,
            ),
            OpenApiExample(
                "Three subjects with attributes",
                value={
                    "experiment_id": "checkout-button",
                    "subject_ids": ["u1", "u2", "u3"],
                    "attributes": {"u1": {"country": "DE"}, "u2": {"country": "AT"}, "u3": {"country": "FR"}},
                },
                request_only=True,
            ),
            OpenApiExample(
                "Their variants", value={"assignments": {"u1": "control", "u2": "green"}}, response_only=True
            ),
            OpenApiExample(
                "One subject outside the targeting",
                value={
                    "assignments": {"u1": "control", "u2": "green", "u3": "control"},
                    "excluded": {"u3": "not_targeted"},
                },
                response_only=True,
            ),
        ],
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "ExperimentAssignmentsResponse",
                    {
                        "assignments": serializers.DictField(child=serializers.CharField()),
                        "excluded": serializers.DictField(
                            child=serializers.ChoiceField(choices=list(gates.REASONS)),
                            required=False,
                            help_text=EXCLUDED_HELP,
                        ),
                        "values": serializers.DictField(
                            child=_value_field(),
                            required=False,
                            help_text="With `include_values`: variant ID to value, for each variant in `assignments`.",
                        ),
                    },
                ),
                description="One key per distinct subject ID exactly as sent; the value is the variant ID. "
                "`excluded` only when a gate kept a subject out.",
            ),
            **problem_responses(
                400,
                *TOKEN_PROBLEMS,
                specific={
                    404: EXPERIMENT_NOT_FOUND,
                    409: ProblemDoc(
                        "The experiment is draft, ended or archived; `experiment_status` says which.",
                        "experiment_not_active",
                        "Experiment not active",
                        "Experiment 'checkout-button' is ended: subjects are assigned while it is active, and given "
                        "its winning variant once a winner is declared.",
                    ),
                },
            ),
        },
    )
    def post(self, request):
        return self.answered(request)

    @staticmethod
    def answer_steps(data: dict, *, vendor: str) -> Steps[dict]:
        """The answer to a valid request."""
        request_log_note(experiment=data["experiment_id"], batch_size=len(data["subject_ids"]))
        answer = yield from assign_subjects_steps(
            vendor=vendor,
            experiment_id=data["experiment_id"],
            subject_ids=data["subject_ids"],
            attributes=data.get("attributes"),
            include_values=data["include_values"],
        )
        body = {"assignments": answer.assignments}
        if answer.excluded:
            body["excluded"] = answer.excluded
        if answer.values is not None:
            body["values"] = answer.values
        return body


class AssignmentsApi(JsonApiView):
    permission_classes = [IsProxyRole]
    vendor = staticmethod(storage_vendor)

    @extend_schema_serializer(component_name="AssignmentsRequest")
    class InputSerializer(serializers.Serializer):
        subject = IdentifierMapField(
            max_entries=MAX_IDENTIFIERS,
            help_text=f"1 to {MAX_IDENTIFIERS} identifiers of one subject: subject type ID (any case) to subject ID.",
        )
        experiments = StringListField(
            max_items=MAX_EXPERIMENTS,
            max_length=EXPERIMENT_ID_MAX_LENGTH,
            required=False,
            help_text=f"1 to {MAX_EXPERIMENTS} experiment IDs. Left out: every active or winner-declared "
            "experiment of the subject's types.",
        )
        assign = StrictBooleanField(
            default=True, help_text="false: store nothing, answer only stored assignments and winners."
        )
        attributes = AttributesField(required=False, help_text="The subject's attributes. " + ATTRIBUTES_HELP)
        include_values = StrictBooleanField(default=False, help_text=INCLUDE_VALUES_HELP)

    body = RequestBody(InputSerializer)

    @extend_schema(
        operation_id="assignments",
        summary="Get or make one subject's assignments in many experiments",
        description="Roles: `proxy`, `admin`. Each experiment is answered by the rules of "
        "`/experiment-assignments` for the identifier of its subject type; both endpoints store and return "
        "the same assignment. Every experiment named appears in exactly one of `assignments` and "
        "`unassigned`. An ID in `experiments` that names no experiment: 404, and nothing is stored.",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "A user with a cookie, in two experiments",
                value={
                    "subject": {"user": "u-1", "cookie": "c-81"},
                    "experiments": ["checkout-button", "pricing"],
                    "assign": True,
                },
                request_only=True,
            ),
            OpenApiExample(
                "Every running experiment, without enrolling",
                value={"subject": {"cookie": "c-81"}, "assign": False},
                request_only=True,
            ),
            OpenApiExample(
                "Their variants",
                value={
                    "assignments": {"checkout-button": "green", "pricing": "control"},
                    "new_assignments": ["pricing"],
                    "unassigned": {"onboarding": "subject_type_missing"},
                },
                response_only=True,
            ),
        ],
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "AssignmentsResponse",
                    {
                        "assignments": serializers.DictField(
                            child=serializers.CharField(), help_text="Experiment ID (as configured) to variant ID."
                        ),
                        "new_assignments": serializers.ListField(
                            child=serializers.CharField(),
                            help_text="The experiments whose assignment this request stored, in the order of "
                            "`assignments`.",
                        ),
                        "unassigned": serializers.DictField(
                            child=serializers.ChoiceField(choices=list(Unassigned.ALL)),
                            help_text="Experiment ID to why it has no variant: `experiment_not_active` (draft, "
                            "ended, archived), `subject_type_missing` (no identifier of its subject type), "
                            "`not_assigned` (`assign` is false and nothing is stored), or the reason a gate kept "
                            "the subject out: "
                            + ", ".join(f"`{reason}`" for reason in gates.REASONS)
                            + "; the first that applies, in this order.",
                        ),
                        "values": serializers.DictField(
                            child=_value_field(),
                            required=False,
                            help_text="With `include_values`: experiment ID to the value of its variant, for each "
                            "experiment in `assignments`.",
                        ),
                    },
                ),
                description="Every experiment asked for, in exactly one of `assignments` and `unassigned`.",
            ),
            **problem_responses(
                *TOKEN_PROBLEMS,
                specific={
                    400: ProblemDoc(
                        "Invalid body (`invalid_request`, `malformed_json`), or a key of `subject` that names no "
                        "active subject type (`unknown_subject_type`).",
                        "unknown_subject_type",
                        "Unknown subject type",
                        "subject.visitor: no subject type has the ID 'visitor'",
                    ),
                    404: EXPERIMENT_NOT_FOUND,
                },
            ),
        },
    )
    def post(self, request):
        return self.answered(request)

    @staticmethod
    def answer_steps(data: dict, *, vendor: str) -> Steps[dict]:
        """The answer to a valid request."""
        experiment_ids = data.get("experiments")
        if experiment_ids is not None and len(experiment_ids) == 1:
            request_log_note(experiment=experiment_ids[0])
        answer = yield from assign_subject_steps(
            vendor=vendor,
            subject=data["subject"],
            experiment_ids=experiment_ids,
            assign=data["assign"],
            attributes=data.get("attributes"),
            include_values=data["include_values"],
        )
        # The batch of this endpoint is the experiments answered, named or found running.
        request_log_note(batch_size=len(answer.assignments) + len(answer.unassigned))
        body = {
            "assignments": answer.assignments,
            "new_assignments": answer.new_assignments,
            "unassigned": answer.unassigned,
        }
        if answer.values is not None:
            body["values"] = answer.values
        return body


class IdLinkApi(LinkApi):
    """POST /id-link (idlinks/api.py), its identifiers' subject types found among this app's."""

    subject_types_active = staticmethod(subject_types_active_steps)
