"""RFC 9457 problem details: the one shape of every error this service returns."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.http import JsonResponse

from core.middleware.requestid import request_id_current

PROBLEM_CONTENT_TYPE = "application/problem+json"


class ProblemError(Exception):
    """A domain failure that the API answers as problem+json.

    Subclasses name the status, the stable `code` clients branch on, and a title, in their header;
    `extra` adds members such as `experiment_status`.
    """

    status = 400
    code = "invalid_request"
    title = "Invalid request"

    def __init_subclass__(cls, *, status: int, code: str, title: str, **kwargs: Any) -> None:
        """A subclass names its answer in its header: `class Gone(ProblemError, status=410, code=..., title=...)`."""
        super().__init_subclass__(**kwargs)
        cls.status, cls.code, cls.title = status, code, title

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


def problem_body(
    *, status: int, code: str, detail: str, title: str | None = None, errors: list | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "code": code,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    body.update(extra)
    # Outside a request (a test calling this directly) there is no ID to name.
    request_id = request_id_current()
    if request_id is not None:
        body["request_id"] = request_id
    return body


def problem_response(
    *,
    status: int,
    code: str,
    detail: str,
    title: str | None = None,
    errors: list | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JsonResponse:
    body = problem_body(status=status, code=code, detail=detail, title=title, errors=errors, **extra)
    response = JsonResponse(
        body, status=status, content_type=PROBLEM_CONTENT_TYPE, json_dumps_params={"ensure_ascii": False}
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response
