"""One log line per request: method, path, status, duration, and what the view and the authentication noted
(experiment, batch size, token name; never the token). docs/reference/metrics-and-logs.md.

The line goes to the `config.requestlog` logger, whose handler has no repeat summary
(core/observability/logfilters.py): every request gets its line, also when a thousand fail alike.
"""

from __future__ import annotations

import logging
import time
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


class RequestLogMiddleware:
    """Second in MIDDLEWARE, inside RequestIdMiddleware: its line carries the request ID."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        noted: dict[str, Any] = {}
        token = _noted.set(noted)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
        finally:
            _noted.reset(token)
        duration_ms = round((time.perf_counter() - started) * 1000, 2)
        logger.info(
            "%s %s %s %.2f ms",
            request.method,
            request.path,
            response.status_code,
            duration_ms,
            extra={
                **noted,
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": duration_ms,
            },
        )
        return response
