"""Failures of the assignment and identifier-link APIs that clients branch on."""

from __future__ import annotations

from core.api.problems import ProblemError


class ExperimentNotFound(ProblemError):
    status = 404
    code = "experiment_not_found"
    title = "Experiment not found"


class ExperimentNotActive(ProblemError):
    status = 409
    code = "experiment_not_active"
    title = "Experiment not active"


class UnknownSubjectType(ProblemError):
    status = 400
    code = "unknown_subject_type"
    title = "Unknown subject type"


class InvalidAttributes(ProblemError):
    """Attribute values that do not have the types their subject type declares; `errors` names each."""

    status = 400
    code = "invalid_request"
    title = "Invalid request"
