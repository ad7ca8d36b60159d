"""The DRF exception handler: every failure inside an API view becomes problem+json."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, InterfaceError, InternalError, OperationalError
from django.http import Http404
from psycopg.errors import LockNotAvailable, QueryCanceled
from rest_framework import exceptions

from core.api.problems import ProblemError, problem_response
from core.database import message_first_line
from core.observability.metrics import database_unavailable_answered

# Named as before the module moved: log routing and docs/reference/metrics-and-logs.md know it by this name.
logger = logging.getLogger("config.exceptions")

RETRY_AFTER_SECONDS = "5"


def flatten_errors(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """DRF's nested error detail as [{"field": "subject_ids.3", "message": ...}]."""
    if isinstance(detail, dict):
        flat = []
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            field = f"{prefix}.{name}" if prefix and name else (prefix or name)
            flat.extend(flatten_errors(value, field))
        return flat
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return [{"field": prefix, "message": str(item)} for item in detail]
        flat = []
        for index, item in enumerate(detail):
            if item:
                flat.extend(flatten_errors(item, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    return [{"field": prefix, "message": str(detail)}]


def validation_problem(detail: Any):
    errors = flatten_errors(detail)
    summary = "; ".join(f"{e['field']}: {e['message']}" if e["field"] else e["message"] for e in errors)
    return problem_response(status=400, code="invalid_request", title="Invalid request", detail=summary, errors=errors)


# Citus reports a worker it cannot reach as an internal error (SQLSTATE XX000), not a connection error.
CITUS_WORKER_UNREACHABLE = ("failure on connection marked as essential", "connection to the remote node")


def is_database_unavailable(exc: BaseException) -> bool:
    """Whether exc means the database cannot be reached or used, rather than a bad query or data."""
    if isinstance(exc, InternalError) and str(exc).startswith(CITUS_WORKER_UNREACHABLE):
        return True
    return isinstance(exc, (OperationalError, InterfaceError)) or type(exc) is DatabaseError


def is_database_timeout(exc: BaseException | None) -> bool:
    """Whether the database answered but gave up on the statement (statement or lock timeout)."""
    return isinstance(getattr(exc, "__cause__", None), (QueryCanceled, LockNotAvailable))


def database_unavailable_log(exc: BaseException, where: str = "") -> None:
    """One line, the driver's message's first, at WARNING (repeats are summarised, core/observability/logfilters.py);
    the whole exception at DEBUG."""
    logger.warning(
        "database unavailable%s: %s: %s", where, type(exc.__cause__ or exc).__name__, message_first_line(exc)
    )
    logger.debug("database unavailable%s", where, exc_info=exc)


def database_unavailable_problem(exc: BaseException | None = None):
    timeout = is_database_timeout(exc)
    database_unavailable_answered(timeout=timeout)
    if timeout:
        detail = "The database did not answer in time; retry later."
    else:
        detail = "The database cannot be reached; retry later."
    return problem_response(
        status=503,
        code="database_unavailable",
        title="Database unavailable",
        detail=detail,
        headers={"Retry-After": RETRY_AFTER_SECONDS},
    )


def _permission_denied_detail(exc: exceptions.APIException, context: dict) -> str:
    """The refusing permission's own message (tokens/authentication.py names the role the endpoint needs),
    else the general one: DRF's default detail says nothing a caller could act on."""
    if exc.detail != exceptions.PermissionDenied.default_detail:
        return str(exc.detail)
    return "This token's role may not call this endpoint."


def _allow(exc: exceptions.APIException, context: dict) -> dict[str, str] | None:
    allowed = ", ".join(context["view"].allowed_methods) if context.get("view") else ""
    return {"Allow": allowed} if allowed else None


def _retry_after(exc: exceptions.Throttled, context: dict) -> dict[str, str]:
    wait = exc.wait if exc.wait is not None else 1
    return {"Retry-After": str(max(1, int(wait + 0.999)))}


def _said(exc: exceptions.APIException, context: dict) -> str:
    return str(exc.detail)


def _fixed(detail: str) -> Callable[[exceptions.APIException, dict], str]:
    return lambda exc, context: detail


@dataclass(frozen=True)
class Problem:
    """How one kind of exception is answered: its status, code and title, and its detail and headers made
    from the exception and the view's context."""

    status: int
    code: str
    title: str
    detail: Callable[[Any, dict], str] = _said
    headers: Callable[[Any, dict], dict[str, str] | None] = lambda exc, context: None


NOT_AUTHENTICATED = Problem(
    401, "not_authenticated", "Not authenticated", headers=lambda exc, context: {"WWW-Authenticate": "Bearer"}
)

# DRF's exceptions by class (a subclass is answered as the first class of its MRO found here).
PROBLEMS: dict[type[exceptions.APIException], Problem] = {
    exceptions.ParseError: Problem(400, "malformed_json", "Malformed JSON"),
    exceptions.UnsupportedMediaType: Problem(
        415,
        "unsupported_media_type",
        "Unsupported media type",
        detail=_fixed("Send the body as JSON with Content-Type: application/json."),
    ),
    exceptions.NotAuthenticated: NOT_AUTHENTICATED,
    exceptions.AuthenticationFailed: NOT_AUTHENTICATED,
    exceptions.PermissionDenied: Problem(
        403, "permission_denied", "Permission denied", detail=_permission_denied_detail
    ),
    exceptions.NotFound: Problem(404, "not_found", "Not found", detail=_fixed("No such resource.")),
    exceptions.MethodNotAllowed: Problem(405, "method_not_allowed", "Method not allowed", headers=_allow),
    exceptions.Throttled: Problem(429, "rate_limited", "Too many requests", headers=_retry_after),
}


def _converted(exc: Exception) -> Exception:
    """Django's own refusals as DRF's, as DRF's handler converts them, so one table answers both."""
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    return exc


def problem_exception_handler(exc: Exception, context: dict) -> Any:
    exc = _converted(exc)
    if isinstance(exc, ProblemError):
        return problem_response(status=exc.status, code=exc.code, title=exc.title, detail=exc.detail, **exc.extra)
    if isinstance(exc, exceptions.ValidationError):
        return validation_problem(exc.detail)
    problem = next((PROBLEMS[cls] for cls in type(exc).__mro__ if cls in PROBLEMS), None)
    if problem is not None:
        return problem_response(
            status=problem.status,
            code=problem.code,
            title=problem.title,
            detail=problem.detail(exc, context),
            headers=problem.headers(exc, context),
        )
    if is_database_unavailable(exc):
        database_unavailable_log(exc)
        return database_unavailable_problem(exc)
    if isinstance(exc, exceptions.APIException):
        return problem_response(
            status=exc.status_code, code=exc.default_code, title="Request failed", detail=str(exc.detail)
        )
    return None
