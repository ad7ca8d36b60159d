"""POST /experiment-assignments (CONTRACT.md section 3)."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response

from assignments.services import assign_subjects
from config.api import JsonApiView
from config.authentication import IsProxyRole
from config.fields import StrictStringField, SubjectIdListField


class ExperimentAssignmentsApi(JsonApiView):
    permission_classes = [IsProxyRole]

    class InputSerializer(serializers.Serializer):
        experiment_id = StrictStringField(max_length=1000)
        subject_ids = SubjectIdListField()

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        assignments = assign_subjects(
            experiment_id=serializer.validated_data["experiment_id"],
            subject_ids=serializer.validated_data["subject_ids"],
        )
        return Response({"assignments": assignments})
