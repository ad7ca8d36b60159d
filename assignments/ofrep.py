"""OpenFeature remote evaluation (OFREP 0.3.0): an experiment is a flag, its variants the flag's variants,
`context.targetingKey` the subject ID (docs/reference/api.md, "OpenFeature remote evaluation").

An evaluation is POST /assignments for that one subject (assign_subject_steps): the same
assignment, stored by whichever comes first, in the same statements. This module
reads the request's context and shapes the answer; what the protocol adds to every
answer (errors' members, ETag and 304, CORS) is the edge's (core/edge/ofrep.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from assignments import gates
from assignments.assigning import SubjectAssignments, Unassigned, assign_subject_steps, experiment_state_named_steps
from assignments.errors import ExperimentNotFound, InvalidAttributes, UnknownSubjectType
from assignments.models import Assignment, Experiment
from assignments.selectors import ExperimentState
from assignments.storage import storage_vendor
from core.api.fields import subject_id_problem
from core.api.problems import ProblemError
from core.api.schema import TOKEN_PROBLEMS, ProblemDoc, problem_responses
from core.api.views import JsonApiView
from core.middleware.requestlog import request_log_note
from core.steps import Steps
from tokens.authentication import IsClientRole, OfrepTokenAuthentication

SPLIT, TARGETING_MATCH, STATIC, DEFAULT, DISABLED = "SPLIT", "TARGETING_MATCH", "STATIC", "DEFAULT", "DISABLED"
PARSE_ERROR, FLAG_NOT_FOUND = "PARSE_ERROR", "FLAG_NOT_FOUND"
TARGETING_KEY_MISSING, INVALID_CONTEXT = "TARGETING_KEY_MISSING", "INVALID_CONTEXT"

TARGETING_KEY, SUBJECT_TYPE = "targetingKey", "subjectType"
# Context entries that are not attributes.
NOT_ATTRIBUTES = frozenset({TARGETING_KEY, SUBJECT_TYPE})


class OfrepInvalid(ProblemError, status=400, code="invalid_request", title="Invalid request"):
    """A body or context OFREP refuses; `errorCode` says how (PARSE_ERROR, TARGETING_KEY_MISSING, INVALID_CONTEXT)."""


def _invalid(error_code: str, field: str, message: str) -> OfrepInvalid:
    # Worded as the problem table words field errors (core.api.exceptions.validation_problem).
    detail = f"{field}: {message}" if field else message
    return OfrepInvalid(detail, errors=[{"field": field, "message": message}], errorCode=error_code)


class ContextBody:
    """The body of both endpoints, `{"context": {...}}`: validated to the context object (PARSE_ERROR else)."""

    def validate(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise _invalid(PARSE_ERROR, "", 'the body must be a JSON object: {"context": {"targetingKey": "..."}}')
        context = data.get("context")
        if not isinstance(context, dict):
            raise _invalid(PARSE_ERROR, "context", "is required" if context is None else "must be an object")
        return context


def _targeting_key(context: Mapping[str, Any]) -> str:
    """The subject ID: TARGETING_KEY_MISSING when there is none, INVALID_CONTEXT when it is not a valid one."""
    value = context.get(TARGETING_KEY)
    if value is None:
        message = "is required"
    elif not isinstance(value, str):
        message = "must be a string"
    elif not value:
        message = "must not be empty"
    else:
        problem = subject_id_problem(value)
        if problem:
            raise _invalid(INVALID_CONTEXT, f"context.{TARGETING_KEY}", problem)
        return value
    raise _invalid(TARGETING_KEY_MISSING, f"context.{TARGETING_KEY}", message)


def _is_attribute_value(value: object) -> bool:
    return isinstance(value, (str, bool)) or gates.is_number(value)


def _attributes(context: Mapping[str, Any]) -> dict[str, object]:
    """The context's attributes: its entries but targetingKey and subjectType whose values an attribute may
    have (a string, a finite number or a boolean; others are ignored, as SDKs send what their callers set)."""
    attributes = {
        name: value for name, value in context.items() if name not in NOT_ATTRIBUTES and _is_attribute_value(value)
    }
    if len(attributes) > gates.MAX_ATTRIBUTES:
        raise _invalid(
            INVALID_CONTEXT, "context", f"must have at most {gates.MAX_ATTRIBUTES} attributes, got {len(attributes)}"
        )
    errors = [
        {"field": f"context.{name}", "message": problem}
        for name, value in attributes.items()
        if (problem := gates.attribute_problem(name, value))
    ]
    if errors:
        raise OfrepInvalid(
            "; ".join(f"{e['field']}: {e['message']}" for e in errors), errors=errors, errorCode=INVALID_CONTEXT
        )
    return attributes


def _evaluated(
    subject: dict[str, str], attributes: dict[str, object], *, field: str, **kwargs: Any
) -> Steps[SubjectAssignments]:
    """assign_subject_steps for one identifier, its refusals as OFREP's INVALID_CONTEXT: an attribute of the
    wrong type, or the subject type unknown or archived, named as the context's `field`."""
    try:
        return (
            yield from assign_subject_steps(
                subject=subject,
                assign=True,
                attributes=attributes,
                detailed=True,
                attributes_field="context",
                **kwargs,
            )
        )
    except InvalidAttributes as refused:
        raise InvalidAttributes(refused.detail, **refused.extra, errorCode=INVALID_CONTEXT) from None
    except UnknownSubjectType as refused:
        # One identifier, so one error.
        message = refused.extra["errors"][0]["message"]
        raise UnknownSubjectType(
            f"{field}: {message}", errors=[{"field": field, "message": message}], errorCode=INVALID_CONTEXT
        ) from None


def flag_evaluation(answer: SubjectAssignments, state: ExperimentState) -> dict[str, Any]:
    """One experiment's evaluation, shaped as OFREP's success: the stored (or winning) variant, else the
    control, with the reason and metadata of the case."""
    metadata: dict[str, Any] = {"experimentStatus": state.status}
    variant = answer.assignments.get(state.key)
    if variant is None:
        variant = state.variant_keys[state.control_pk]
        unassigned = answer.unassigned[state.key]
        if unassigned == Unassigned.EXPERIMENT_NOT_ACTIVE:
            reason = DISABLED
        else:
            reason = DEFAULT
            metadata["excludedReason"] = unassigned
    elif state.status == Experiment.Status.WINNER_DECLARED:
        reason = STATIC
    else:
        cohort, source = answer.rows[state.key]
        reason = TARGETING_MATCH if source == Assignment.Source.FORCED else SPLIT
        metadata["source"], metadata["cohort"] = source, cohort
    return {
        "key": state.key,
        "value": state.value_of(variant),
        "variant": variant,
        "reason": reason,
        "metadata": metadata,
    }


EVALUATION_SCHEMA = {
    "key": serializers.CharField(help_text="The experiment's ID, as configured."),
    "value": serializers.JSONField(help_text="The variant's value (its ID without a value type)."),
    "variant": serializers.CharField(),
    "reason": serializers.ChoiceField(choices=[SPLIT, TARGETING_MATCH, STATIC, DEFAULT, DISABLED]),
    "metadata": serializers.DictField(
        help_text="`experimentStatus`; `source` and `cohort` with SPLIT and TARGETING_MATCH; `excludedReason` "
        "with DEFAULT."
    ),
}
CONTEXT_REQUEST = inline_serializer(
    "OfrepEvaluationRequest",
    {"context": serializers.DictField(help_text="`targetingKey` (the subject ID) and the subject's attributes.")},
)
OFREP_DESCRIPTION = (
    "Roles: `client`, `proxy`, `admin`; the token may also come as `X-API-Key`. Errors add OFREP's "
    "`errorCode` and `errorDetails` to the problem."
)


class OfrepApi(JsonApiView):
    """What both evaluation endpoints take: their tokens, roles and body."""

    authentication_classes = [OfrepTokenAuthentication]
    permission_classes = [IsClientRole]
    body = ContextBody()
    vendor = staticmethod(storage_vendor)


class OfrepFlagApi(OfrepApi):
    """POST /ofrep/v1/evaluate/flags/{key}: one experiment for one subject."""

    @extend_schema(
        operation_id="ofrep_evaluate_flag",
        summary="Evaluate one experiment as an OpenFeature flag",
        description=OFREP_DESCRIPTION + " The evaluation stores and returns the assignment POST /assignments "
        "would, for the subject `context.targetingKey` of the experiment's subject type.",
        request=CONTEXT_REQUEST,
        examples=[
            OpenApiExample(
                "A subject in Germany", value={"context": {"targetingKey": "u-1", "country": "DE"}}, request_only=True
            ),
            OpenApiExample(
                "Its variant",
                value={
                    "key": "checkout-button",
                    "value": {"label": "Buy now"},
                    "variant": "green",
                    "reason": SPLIT,
                    "metadata": {"experimentStatus": "active", "source": "hashed", "cohort": 1},
                },
                response_only=True,
            ),
        ],
        responses={
            200: OpenApiResponse(inline_serializer("OfrepEvaluation", EVALUATION_SCHEMA)),
            **problem_responses(
                400,
                *TOKEN_PROBLEMS,
                specific={
                    404: ProblemDoc(
                        "No experiment has that ID (`errorCode` FLAG_NOT_FOUND).",
                        "experiment_not_found",
                        "Experiment not found",
                        "No experiment has the ID 'checkout'.",
                    )
                },
            ),
        },
    )
    def post(self, request, key):
        return Response(self.answer(self.body.validate(request.data), key=key))

    @staticmethod
    def answer_steps(context: dict[str, Any], *, vendor: str, key: str) -> Steps[dict[str, Any]]:
        request_log_note(experiment=key, batch_size=1)
        try:
            state = yield from experiment_state_named_steps(experiment_id=key)
        except ExperimentNotFound as unknown:
            raise ExperimentNotFound(unknown.detail, errorCode=FLAG_NOT_FOUND) from None
        subject_id = _targeting_key(context)
        # The subject type is the experiment's, not the caller's: an archived one is named on the ID given in it.
        answer = yield from _evaluated(
            {state.subject_type_key: subject_id},
            _attributes(context),
            vendor=vendor,
            field=f"context.{TARGETING_KEY}",
            experiment_ids=[key],
        )
        return flag_evaluation(answer, answer.states[0])


class OfrepFlagsApi(OfrepApi):
    """POST /ofrep/v1/evaluate/flags: every experiment of a subject type listed for bulk evaluation."""

    @extend_schema(
        operation_id="ofrep_evaluate_flags",
        summary="Evaluate every bulk-listed experiment of a subject type as OpenFeature flags",
        description=OFREP_DESCRIPTION + " Every active or winner-declared experiment of `context.subjectType` "
        "whose `bulkEvaluation` is true is evaluated, and stores, as the single evaluation would. The answer "
        "carries an `ETag`; with a matching `If-None-Match`: 304.",
        request=CONTEXT_REQUEST,
        examples=[
            OpenApiExample(
                "A user", value={"context": {"targetingKey": "u-1", "subjectType": "user"}}, request_only=True
            )
        ],
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "OfrepBulkEvaluation",
                    {"flags": serializers.ListField(child=inline_serializer("OfrepFlag", EVALUATION_SCHEMA))},
                ),
                description="In experiment ID order, ignoring case.",
            ),
            304: OpenApiResponse(description="`If-None-Match` matched the answer's `ETag`: no body."),
            **problem_responses(400, *TOKEN_PROBLEMS),
        },
    )
    def post(self, request):
        return self.answered(request)

    @staticmethod
    def answer_steps(context: dict[str, Any], *, vendor: str) -> Steps[dict[str, Any]]:
        subject_id = _targeting_key(context)
        subject_type = context.get(SUBJECT_TYPE)
        if not isinstance(subject_type, str):
            message = "is required" if subject_type is None else "must be a string"
            raise _invalid(INVALID_CONTEXT, f"context.{SUBJECT_TYPE}", message)
        answer = yield from _evaluated(
            {subject_type: subject_id},
            _attributes(context),
            vendor=vendor,
            field=f"context.{SUBJECT_TYPE}",
            experiment_ids=None,
            bulk=True,
        )
        request_log_note(batch_size=len(answer.states))
        return {"flags": [flag_evaluation(answer, state) for state in answer.states]}
