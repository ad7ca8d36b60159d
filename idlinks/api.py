"""POST /id-link (docs/reference/api.md)."""

from __future__ import annotations

from typing import ClassVar

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers

from core.api.fields import StrictStringField, SubjectIdField
from core.api.schema import TOKEN_PROBLEMS, ProblemDoc, problem_responses
from core.api.views import JsonApiView, RequestBody
from core.steps import Steps
from idlinks.services import Identifier, SubjectTypesActive, id_link_create_steps
from tokens.authentication import IsProxyRole

STRICT_MESSAGES = {"required": "is required", "null": "must not be null"}


class IdLinkApi(JsonApiView):
    """POST /id-link. Subject types belong to the app above this one, which serves this view with its
    own subject_types_active (assignments.api.IdLinkApi)."""

    permission_classes = [IsProxyRole]
    subject_types_active: ClassVar[SubjectTypesActive]

    @extend_schema_serializer(component_name="IdLinkRequest")
    class InputSerializer(serializers.Serializer):
        default_error_messages = {"invalid": "the body must be a JSON object"}

        @extend_schema_serializer(component_name="Identifier")
        class IdentifierSerializer(serializers.Serializer):
            default_error_messages = {"invalid": "must be an object with subject_type and subject_id"}

            # Longer than any resource ID, so that a long unknown type is still answered unknown_subject_type.
            subject_type = StrictStringField(max_length=1000)
            subject_id = SubjectIdField()

        identifiers = IdentifierSerializer(
            many=True,
            min_length=2,
            max_length=2,
            error_messages={
                **STRICT_MESSAGES,
                "not_a_list": "must be an array of 2 identifiers",
                "min_length": "must contain exactly 2 identifiers",
                "max_length": "must contain exactly 2 identifiers",
            },
        )

    body = RequestBody(InputSerializer)

    @extend_schema(
        operation_id="id_link",
        summary="Link two identifiers of one person or thing",
        description="Roles: `proxy`, `admin`. Linking a pair that is already linked, in either order, "
        "also answers 200 and stores nothing new.",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "A cookie and a user",
                value={
                    "identifiers": [
                        {"subject_type": "cookie", "subject_id": "c-81"},
                        {"subject_type": "user", "subject_id": "u-1"},
                    ]
                },
                request_only=True,
            ),
        ],
        responses={
            200: OpenApiResponse(
                inline_serializer("IdLinkResponse", {"success": serializers.BooleanField()}),
                description="The link is stored (or already was).",
            ),
            **problem_responses(
                *TOKEN_PROBLEMS,
                specific={
                    400: ProblemDoc(
                        "Invalid body (`invalid_request`, `malformed_json`), a subject type that does not exist or "
                        "is archived (`unknown_subject_type`), or two equal identifiers (`self_link`).",
                        "unknown_subject_type",
                        "Unknown subject type",
                        "Subject type 'visitor' does not exist or is archived.",
                    )
                },
            ),
        },
    )
    def post(self, request):
        return self.answered(request)

    @classmethod
    def answer_steps(cls, data: dict, *, vendor: str) -> Steps[dict]:
        """The answer to a valid request."""
        first, second = (Identifier(**item) for item in data["identifiers"])
        yield from id_link_create_steps(
            vendor=vendor, first=first, second=second, subject_types_active=cls.subject_types_active
        )
        return {"success": True}
