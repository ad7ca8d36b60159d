"""The request ID: taken from `X-Request-ID` when it is safe to repeat, else made here; sent back in the
response's `X-Request-ID`, in every problem+json body (core/api/problems.py) and on every log line written
while the request runs (core/observability/logfilters.py.RequestIdFilter). docs/reference/metrics-and-logs.md.
"""

from __future__ import annotations

import re
import secrets
from contextvars import ContextVar

from django.core.signals import request_finished, request_started

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_MAX_LENGTH = 128
# What a log line, a JSON body and a response header can carry as is: no spaces, quotes, backslashes,
# control characters or anything that a log parser or a header could read as a separator.
REQUEST_ID_PATTERN = re.compile(rf"[A-Za-z0-9._:+/=@-]{{1,{REQUEST_ID_MAX_LENGTH}}}")

# Each gunicorn thread answers one request at a time, in a context of its own.
_current: ContextVar[str | None] = ContextVar("request_id", default=None)


def request_id_new() -> str:
    """32 hexadecimal digits, the shape of nginx's $request_id."""
    return secrets.token_hex(16)


def request_id_accept(presented: str | None) -> str:
    """The ID a client or a proxy sent, if it is one to keep; otherwise a new one."""
    if presented is not None and REQUEST_ID_PATTERN.fullmatch(presented):
        return presented
    return request_id_new()


def request_id_current() -> str | None:
    """The ID of the request this thread is answering, or None outside a request."""
    return _current.get()


def request_id_begin(presented: str | None) -> str:
    """Choose the ID of the request this context answers (request_id_accept) and return it; a request on the
    event loop (core/edge/asgi.py) has a context, an asyncio task, of its own."""
    request_id = request_id_accept(presented)
    _current.set(request_id)
    return request_id


def request_id_presented(scope: dict) -> str | None:
    """The X-Request-ID header of an ASGI request's scope, or None."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            return value.decode("latin-1")
    return None


def _request_started(sender, environ=None, scope=None, **kwargs) -> None:
    # Django's WSGI handler sends the request's environ, its ASGI handler the request's scope.
    request_id_begin(environ.get("HTTP_X_REQUEST_ID") if environ is not None else request_id_presented(scope or {}))


def _request_finished(sender, **kwargs) -> None:
    _current.set(None)


class RequestIdMiddleware:
    """Puts the request's ID on its response; first in MIDDLEWARE.

    The ID is chosen when Django's handler starts the request (request_started)
    and forgotten when the response is closed (request_finished), not here: the
    handler logs an error answer (django.request's "Not Found: ...") after every
    middleware has returned, and that line names the request too.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        request_started.connect(_request_started, dispatch_uid="core.middleware.requestid.started")
        request_finished.connect(_request_finished, dispatch_uid="core.middleware.requestid.finished")

    def __call__(self, request):
        request_id = _current.get()
        if request_id is None:
            # Called without a handler's request_started (a test's RequestFactory): an ID for this call only.
            request_id = request_id_accept(request.META.get("HTTP_X_REQUEST_ID"))
            token = _current.set(request_id)
            try:
                response = self.get_response(request)
            finally:
                _current.reset(token)
        else:
            response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response
