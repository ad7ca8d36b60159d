"""The DRF exception handler: every failure inside an API view becomes problem+json."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, InterfaceError, InternalError, OperationalError
from django.http import Http404
from psycopg.errors import LockNotAvailable, QueryCanceled
from rest_framework import exceptions

from core.api.problems import ProblemError, problem_response
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


def message_first_line(exc: BaseException) -> str:
    """What failed, in one line: drivers add hints on further lines ("Is the server running...")."""
    return (str(exc).strip().splitlines() or [""])[0]


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


def _permission_denied_detail(exc: Exception) -> str:
    """The refusing permission's own message (tokens/authentication.py names the role the endpoint needs),
    else the general one: DRF's default detail says nothing a caller could act on."""
    if isinstance(exc, exceptions.PermissionDenied) and exc.detail != exceptions.PermissionDenied.default_detail:
        return str(exc.detail)
    return "This token's role may not call this endpoint."


def problem_exception_handler(exc: Exception, context: dict) -> Any:
    if isinstance(exc, ProblemError):
        return problem_response(status=exc.status, code=exc.code, title=exc.title, detail=exc.detail, **exc.extra)
    if isinstance(exc, exceptions.ValidationError):
        return validation_problem(exc.detail)
    if isinstance(exc, exceptions.ParseError):
        return problem_response(status=400, code="malformed_json", title="Malformed JSON", detail=str(exc.detail))
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return problem_response(
            status=415,
            code="unsupported_media_type",
            title="Unsupported media type",
            detail="Send the body as JSON with Content-Type: application/json.",
        )
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        return problem_response(
            status=401,
            code="not_authenticated",
            title="Not authenticated",
            detail=str(exc.detail),
            headers={"WWW-Authenticate": "Bearer"},
        )
    if isinstance(exc, (exceptions.PermissionDenied, DjangoPermissionDenied)):
        return problem_response(
            status=403,
            code="permission_denied",
            title="Permission denied",
            detail=_permission_denied_detail(exc),
        )
    if isinstance(exc, (exceptions.NotFound, Http404)):
        return problem_response(status=404, code="not_found", title="Not found", detail="No such resource.")
    if isinstance(exc, exceptions.MethodNotAllowed):
        allowed = ", ".join(context["view"].allowed_methods) if context.get("view") else ""
        return problem_response(
            status=405,
            code="method_not_allowed",
            title="Method not allowed",
            detail=str(exc.detail),
            headers={"Allow": allowed} if allowed else None,
        )
    if isinstance(exc, exceptions.Throttled):
        wait = exc.wait if exc.wait is not None else 1
        return problem_response(
            status=429,
            code="rate_limited",
            title="Too many requests",
            detail=str(exc.detail),
            headers={"Retry-After": str(max(1, int(wait + 0.999)))},
        )
    if is_database_unavailable(exc):
        database_unavailable_log(exc)
        return database_unavailable_problem(exc)
    if isinstance(exc, exceptions.APIException):
        return problem_response(
            status=exc.status_code, code=exc.default_code, title="Request failed", detail=str(exc.detail)
        )
    return None
