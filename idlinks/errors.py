"""Failures of the identifier-link API that clients branch on (docs/reference/api.md)."""

from __future__ import annotations

from core.api.problems import ProblemError


class SelfLink(ProblemError, status=400, code="self_link", title="Identifier linked to itself"):
    """The two identifiers of a link are the same one."""
