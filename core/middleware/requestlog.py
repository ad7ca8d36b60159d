"""One log line per request: method, path, status, duration, and what the view and the authentication noted
(experiment, batch size, token name; never the token). docs/reference/metrics-and-logs.md.

The line goes to the `config.requestlog` logger, whose handler has no repeat summary
(core/observability/logfilters.py): every request gets its line, also when a thousand fail alike.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

# Named as before the module moved: log routing and docs/reference/metrics-and-logs.md know it by this name.
logger = logging.getLogger("config.requestlog")

# What the record carries besides its message, in the order a JSON line shows it (core/observability/logformats.py).
REQUEST_FIELDS = ("method", "path", "status", "duration_ms", "experiment", "batch_size", "token_name")

_noted: ContextVar[dict[str, Any] | None] = ContextVar("request_log_noted", default=None)


def request_log_note(**fields: Any) -> None:
    """Add fields to the line of the request being answered (nothing outside a request)."""
    noted = _noted.get()
    if noted is not None:
        noted.update(fields)


@contextlib.contextmanager
def request_log_noting() -> Iterator[dict[str, Any]]:
    """While a request is answered: what request_log_note adds, for its line."""
    noted: dict[str, Any] = {}
    token = _noted.set(noted)
    try:
        yield noted
    finally:
        _noted.reset(token)


def request_log_write(*, method: str, path: str, status: int, started: float, noted: dict[str, Any]) -> None:
    """The request's line, `started` being its time.perf_counter() when it began."""
    duration_ms = round((time.perf_counter() - started) * 1000, 2)
    logger.info(
        "%s %s %s %.2f ms",
        method,
        path,
        status,
        duration_ms,
        extra={**noted, "method": method, "path": path, "status": status, "duration_ms": duration_ms},
    )


class RequestLogMiddleware:
    """Second in MIDDLEWARE, inside RequestIdMiddleware: its line carries the request ID."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        with request_log_noting() as noted:
            response = self.get_response(request)
        request_log_write(
            method=request.method, path=request.path, status=response.status_code, started=started, noted=noted
        )
        return response
