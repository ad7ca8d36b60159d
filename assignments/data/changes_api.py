"""GET /changes: the change feed, for copies of the assignments and links kept elsewhere
(docs/reference/api.md, assignments/data/changes.py)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from assignments.data.changes import LIMIT_DEFAULT, LIMIT_MAX, changes_page
from core.api.schema import ProblemDoc, problem_responses
from core.api.views import JsonApiView
from core.commitorder import Position
from core.database import with_live_connection

CURSOR_MAX_LENGTH = 100


class ChangesApi(JsonApiView):
    """The permission is the default one: `admin` tokens only."""

    class QuerySerializer(serializers.Serializer):
        after = serializers.CharField(
            required=False,
            allow_blank=False,
            trim_whitespace=False,
            max_length=CURSOR_MAX_LENGTH,
            error_messages={"blank": "must be a cursor, not empty", "max_length": "is not a cursor of this service"},
        )
        limit = serializers.IntegerField(
            required=False,
            min_value=1,
            max_value=LIMIT_MAX,
            default=LIMIT_DEFAULT,
            error_messages={
                "invalid": f"must be a whole number from 1 to {LIMIT_MAX}",
                "min_value": f"must be a whole number from 1 to {LIMIT_MAX}",
                "max_value": f"must be a whole number from 1 to {LIMIT_MAX}",
            },
        )

        def validate_after(self, value: str) -> Position:
            position = Position.parse(value)
            if position is None:
                raise serializers.ValidationError("is not a cursor of this service")
            return position

    query = QuerySerializer()

    @extend_schema(
        operation_id="changes",
        summary="Every change to stored assignments and links, from a cursor on",
        description="Role: `admin`. For copies kept elsewhere (a warehouse table, a stream): starting anywhere "
        "and passing each `next` as the next `after` yields every later change exactly once, whatever the order "
        "in which concurrent writers commit (docs/explanation/change-feed.md). A change is served once no "
        "change with a smaller cursor can still appear.",
        parameters=[
            OpenApiParameter(
                "after",
                OpenApiTypes.STR,
                description="A cursor this service gave (`next`, or a change's `cursor`): the changes after it. "
                "Without it, from the oldest change kept.",
            ),
            OpenApiParameter(
                "limit",
                OpenApiTypes.INT,
                description=f"At most this many changes, 1 to {LIMIT_MAX}; {LIMIT_DEFAULT} by default.",
            ),
        ],
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "ChangesResponse",
                    {
                        "changes": serializers.ListField(child=serializers.DictField()),
                        "next": serializers.CharField(),
                    },
                ),
                description="Up to `limit` changes, oldest first, and the cursor to read on from.",
                examples=[
                    OpenApiExample(
                        "An assignment and a link",
                        value={
                            "changes": [
                                {
                                    "cursor": "c1.3e8.0.1",
                                    "kind": "assignment.created",
                                    "recorded_at": "2026-11-28T10:00:00.123456Z",
                                    "assignment": {
                                        "experiment_id": "checkout-button",
                                        "subject_id": "u-1",
                                        "variant_id": "green",
                                        "cohort": 1,
                                        "created_at": "2026-11-28T10:00:00.120000Z",
                                        "source": "hashed",
                                    },
                                },
                                {
                                    "cursor": "c1.3e9.1.1",
                                    "kind": "link.created",
                                    "recorded_at": "2026-11-28T10:00:01.000000Z",
                                    "link": {
                                        "subject_type_a": "cookie",
                                        "subject_id_a": "c-81",
                                        "subject_type_b": "user",
                                        "subject_id_b": "u-1",
                                        "created_at": "2026-11-28T10:00:01.000000Z",
                                    },
                                },
                            ],
                            "next": "c1.3e9.1.1",
                        },
                        response_only=True,
                    )
                ],
            ),
            **problem_responses(
                401,
                403,
                500,
                503,
                specific={
                    400: ProblemDoc(
                        "A malformed cursor, or a `limit` outside 1 to 10000 or not a whole number "
                        "(`invalid_request`).",
                        "invalid_request",
                        "Invalid request",
                        "limit: must be a whole number from 1 to 10000",
                    ),
                    410: ProblemDoc(
                        "Changes after the cursor are older than `CHANGES_RETENTION_DAYS` and were dropped: start "
                        "again from a full export (`cursor_expired`).",
                        "cursor_expired",
                        "Cursor expired",
                        "changes after this cursor are older than the changes kept (CHANGES_RETENTION_DAYS) and "
                        "were dropped: start again from a full export (export_assignments, export_id_links) and "
                        "follow the feed from a new cursor",
                    ),
                },
            ),
        },
    )
    def get(self, request):
        asked = self.query.run_validation(request.query_params.dict())
        page = with_live_connection(changes_page, after=asked.get("after"), limit=asked["limit"])
        return Response({"changes": [change.as_json() for change in page.changes], "next": page.next.cursor()})
