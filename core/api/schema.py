"""The OpenAPI description's shared parts: the Problem body, error responses, /healthz (the
security schemes are in tokens/authentication.py, the experiment status of a 409 in assignments/openapi.py)."""

from __future__ import annotations

from typing import Any, NamedTuple

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import serializers

from core.api.fields import SUBJECT_ID_MAX_LENGTH
from core.api.problems import PROBLEM_CONTENT_TYPE
from core.middleware.requestid import REQUEST_ID_HEADER, REQUEST_ID_PATTERN

PROBLEM_CODES = [
    "invalid_request",
    "malformed_json",
    "unsupported_media_type",
    "not_authenticated",
    "permission_denied",
    "experiment_not_found",
    "experiment_not_active",
    "unknown_subject_type",
    "self_link",
    "payload_too_large",
    "method_not_allowed",
    "not_found",
    "rate_limited",
    "database_unavailable",
    "cursor_expired",
    "internal_error",
]


class ProblemFieldErrorSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="Dotted path of the offending field, e.g. `subject_ids.3`.")
    message = serializers.CharField()


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details; `code` is the stable string to branch on."""

    type = serializers.CharField(help_text="Always `about:blank`.")
    title = serializers.CharField()
    status = serializers.IntegerField(min_value=400, max_value=599)
    code = serializers.ChoiceField(choices=PROBLEM_CODES)
    detail = serializers.CharField()
    errors = ProblemFieldErrorSerializer(many=True, required=False, help_text="Field problems, on 400 only.")
    request_id = serializers.CharField(
        help_text="The request's ID, as in the `X-Request-ID` response header and the service's log lines: "
        "the client's own `X-Request-ID` when it is 1 to 128 letters, digits or `._:+/=@-`, else one made "
        "by the service."
    )


class ProblemDoc(NamedTuple):
    """When a status is answered, and an example body's code, title and detail."""

    description: str
    code: str
    title: str
    detail: str


_PROBLEMS: dict[int, ProblemDoc] = {
    400: ProblemDoc(
        "The body is not valid JSON (`malformed_json`) or a field is invalid (`invalid_request`, with `errors`).",
        "invalid_request",
        "Invalid request",
        "subject_ids: must contain at least 1 item",
    ),
    401: ProblemDoc(
        "No token, or a malformed, unknown, revoked or expired one. Carries `WWW-Authenticate: Bearer`.",
        "not_authenticated",
        "Not authenticated",
        "The token is not known.",
    ),
    403: ProblemDoc(
        "The token's role may not call this operation.",
        "permission_denied",
        "Permission denied",
        "This token's role may not call this endpoint.",
    ),
    404: ProblemDoc("Not found.", "not_found", "Not found", "No such resource."),
    413: ProblemDoc(
        "The body is over 1 MiB.",
        "payload_too_large",
        "Payload too large",
        "The request body is 2000000 bytes; the limit is 1048576 bytes.",
    ),
    415: ProblemDoc(
        "The body is not sent as `application/json`.",
        "unsupported_media_type",
        "Unsupported media type",
        "Send the body as JSON with Content-Type: application/json.",
    ),
    429: ProblemDoc(
        "Too many requests from this client address (answered by the authenticating proxy).",
        "rate_limited",
        "Too many requests",
        "Slow down and retry after the time in Retry-After.",
    ),
    500: ProblemDoc("An unexpected error.", "internal_error", "Internal server error", "An unexpected error occurred."),
    503: ProblemDoc(
        "The database cannot be reached; retry after the time in `Retry-After`.",
        "database_unavailable",
        "Database unavailable",
        "The database cannot be reached; retry later.",
    ),
}

EXAMPLE_REQUEST_ID = "4bf92f3577b34da6a3ce929d0e0e4736"

# What every operation behind a token can answer besides its own outcomes.
TOKEN_PROBLEMS = (401, 403, 413, 415, 429, 500, 503)


def problem_responses(
    *statuses: int, specific: dict[int, ProblemDoc] | None = None
) -> dict[tuple[int, str], OpenApiResponse]:
    """`responses` entries for problem+json answers: the shared ones, and an operation's `specific` ones."""
    docs = {status: _PROBLEMS[status] for status in statuses} | (specific or {})
    responses = {}
    for status, doc in sorted(docs.items()):
        example: dict[str, Any] = {
            "type": "about:blank",
            "title": doc.title,
            "status": status,
            "code": doc.code,
            "detail": doc.detail,
            "request_id": EXAMPLE_REQUEST_ID,
        }
        responses[(status, PROBLEM_CONTENT_TYPE)] = OpenApiResponse(
            response=ProblemSerializer,
            description=doc.description,
            examples=[OpenApiExample(doc.code, value=example, status_codes=[str(status)], response_only=True)],
        )
    return responses


# Subject IDs: no C0 or C1 control characters.
SUBJECT_ID_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"


def _subject_id_schema() -> dict:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": SUBJECT_ID_MAX_LENGTH,
        "pattern": SUBJECT_ID_PATTERN,
        "description": "Opaque, case-sensitive; never trimmed or normalised.",
    }


class StrictStringFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.StrictStringField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "string", "minLength": 1, "maxLength": self.target.max_length}


class SubjectIdFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.SubjectIdField"

    def map_serializer_field(self, auto_schema, direction):
        return _subject_id_schema()


class SubjectIdListFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.SubjectIdListField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "type": "array",
            "minItems": 1,
            "maxItems": settings.ASSIGNMENT_MAX_SUBJECTS,
            "items": _subject_id_schema(),
            "description": "Duplicates are allowed and answered once. The cap is the setting ASSIGNMENT_MAX_SUBJECTS.",
        }


class StrictBooleanFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.StrictBooleanField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "boolean", "default": self.target.default}


class IdentifierMapFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.IdentifierMapField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "type": "object",
            "minProperties": 1,
            "maxProperties": self.target.max_entries,
            "additionalProperties": _subject_id_schema(),
            "description": "Each key an active subject type's ID (any case; two keys may not name one type), "
            "each value that identifier's subject ID.",
        }


class StringListFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.StringListField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "type": "array",
            "minItems": 1,
            "maxItems": self.target.max_items,
            "items": {"type": "string", "minLength": 1, "maxLength": self.target.max_length},
            "description": "Duplicates are allowed and answered once.",
        }


_RESPONSE_HEADERS = {
    "401": {"WWW-Authenticate": {"schema": {"type": "string", "enum": ["Bearer"]}, "description": "Always `Bearer`."}},
    "429": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait before retrying."}},
    "503": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait before retrying."}},
}


# Every response carries it (core/middleware/requestid.py).
_REQUEST_ID_HEADER = {
    REQUEST_ID_HEADER: {
        "schema": {"type": "string", "pattern": f"^{REQUEST_ID_PATTERN.pattern}$"},
        "required": True,
        "description": "The request's ID: the request's own `X-Request-ID` when it is 1 to 128 letters, digits or "
        "`._:+/=@-`, else one made by the service (32 hexadecimal digits). Also in problem bodies (`request_id`) "
        "and in the service's log lines.",
    }
}

# Bounds DRF declares on a nested ListSerializer (min_length/max_length), which drf-spectacular drops.
_ARRAY_BOUNDS = {("IdLinkRequest", "identifiers"): (2, 2)}

_HEALTH_SCHEMA = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["ok", "unavailable"]},
        "database": {"type": "string", "enum": ["ok", "unavailable"]},
    },
    "required": ["status", "database"],
    "description": "Not problem+json, also on 503.",
}
_NO_STORE = {"Cache-Control": {"schema": {"type": "string", "enum": ["no-store"]}}}


def _healthz_operation(method: str) -> dict:
    with_body = method == "get"

    def answer(description: str) -> dict:
        response: dict[str, Any] = {"description": description, "headers": dict(_NO_STORE)}
        if with_body:
            response["content"] = {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}
        return response

    return {
        "operationId": f"healthz_{method}",
        "summary": "Is the process up and its database answering?",
        "description": "No token needed. Answered within 3 seconds even when the database hangs.",
        "tags": ["healthz"],
        "security": [],
        "responses": {
            "200": answer("The process is up and `SELECT 1` succeeded within 2 seconds."),
            "503": answer("The database did not answer within 2 seconds, or failed."),
        },
    }


def postprocess_schema(result: dict, generator, request, public) -> dict:
    """Finish what drf-spectacular cannot derive from the views.

    Paths are named without their optional trailing slash; /healthz, which a
    middleware answers before URL routing (core/healthz.py), is added; and
    the response headers (X-Request-ID on every one) and array bounds the
    generator drops are declared.
    """
    result["paths"] = {path.rstrip("/") or "/": item for path, item in result.get("paths", {}).items()}
    result["paths"]["/healthz"] = {"get": _healthz_operation("get"), "head": _healthz_operation("head")}
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Health"] = _HEALTH_SCHEMA
    for (component, field_name), (min_items, max_items) in _ARRAY_BOUNDS.items():
        if component in schemas:
            schemas[component]["properties"][field_name].update(minItems=min_items, maxItems=max_items)
    for path_item in result["paths"].values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                if status in _RESPONSE_HEADERS and PROBLEM_CONTENT_TYPE in response.get("content", {}):
                    response.setdefault("headers", {}).update(_RESPONSE_HEADERS[status])
                response.setdefault("headers", {}).update(_REQUEST_ID_HEADER)
    return result
