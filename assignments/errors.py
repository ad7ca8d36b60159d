"""Failures of the assignment and identifier-link APIs that clients branch on."""

from __future__ import annotations

from core.api.problems import ProblemError


class ExperimentNotFound(ProblemError, status=404, code="experiment_not_found", title="Experiment not found"):
    """No experiment has the ID asked for (a holdout's ID included, which the detail says)."""


class ExperimentNotActive(ProblemError, status=409, code="experiment_not_active", title="Experiment not active"):
    """The experiment is draft, ended or archived; `experiment_status` names which."""


class UnknownSubjectType(ProblemError, status=400, code="unknown_subject_type", title="Unknown subject type"):
    """A subject type ID that names none, or an archived one; `errors` names each."""


class InvalidAttributes(ProblemError, status=400, code="invalid_request", title="Invalid request"):
    """Attribute values that do not have the types their subject type declares; `errors` names each."""


class CursorExpired(ProblemError, status=410, code="cursor_expired", title="Cursor expired"):
    """A change-feed cursor after which changes older than CHANGES_RETENTION_DAYS were dropped."""
