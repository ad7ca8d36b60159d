"""Failures of the assignment API that clients branch on (CONTRACT.md section 3)."""

from __future__ import annotations

from config.problems import ProblemError


class ExperimentNotFound(ProblemError):
    status = 404
    code = "experiment_not_found"
    title = "Experiment not found"


class ExperimentNotActive(ProblemError):
    status = 409
    code = "experiment_not_active"
    title = "Experiment not active"
