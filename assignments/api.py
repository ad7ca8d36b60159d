"""POST /experiment-assignments (CONTRACT.md section 3)."""

from __future__ import annotations

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.response import Response

from assignments.assigning import assign_subjects
from config.api import JsonApiView, RequestBody
from config.authentication import IsProxyRole
from config.database import with_live_connection
from config.fields import StrictStringField, SubjectIdListField
from config.schema import TOKEN_PROBLEMS, ProblemDoc, problem_responses


class ExperimentAssignmentsApi(JsonApiView):
    permission_classes = [IsProxyRole]

    @extend_schema_serializer(component_name="ExperimentAssignmentsRequest")
    class InputSerializer(serializers.Serializer):
        experiment_id = StrictStringField(max_length=1000)
        subject_ids = SubjectIdListField()

    body = RequestBody(InputSerializer)

    @extend_schema(
        operation_id="experiment_assignments",
        summary="Get or make the subjects' assignments in one experiment",
        description="Roles: `proxy`, `admin`. Active: stored assignments are returned, missing ones made and "
        "stored. Winner declared: the winner for everyone, nothing stored.",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "Two subjects",
                value={"experiment_id": "checkout-button", "subject_ids": ["u1", "u2"]},
                request_only=True,
            ),
            OpenApiExample(
                "Their variants", value={"assignments": {"u1": "control", "u2": "green"}}, response_only=True
            ),
        ],
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "ExperimentAssignmentsResponse",
                    {"assignments": serializers.DictField(child=serializers.CharField())},
                ),
                description="One key per distinct subject ID exactly as sent; the value is the variant ID.",
            ),
            **problem_responses(
                400,
                *TOKEN_PROBLEMS,
                specific={
                    404: ProblemDoc(
                        "No experiment has that ID.",
                        "experiment_not_found",
                        "Experiment not found",
                        "No experiment has the ID 'checkout'.",
                    ),
                    409: ProblemDoc(
                        "The experiment is draft, ended or archived; `experiment_status` says which.",
                        "experiment_not_active",
                        "Experiment not active",
                        "Experiment 'checkout-button' is ended; only active experiments assign subjects.",
                    ),
                },
            ),
        },
    )
    def post(self, request):
        data = self.body.validate(request.data)
        assignments = with_live_connection(
            assign_subjects, experiment_id=data["experiment_id"], subject_ids=data["subject_ids"]
        )
        return Response({"assignments": assignments})
