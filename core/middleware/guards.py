"""Request guards that must hold before any view runs."""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import connection
from django.http import HttpResponse

from core.api.exceptions import database_unavailable_log, database_unavailable_problem, is_database_unavailable
from core.api.paths import is_api_request
from core.api.problems import problem_response


class ConnectionCheckMiddleware:
    """Before a staff page, close a kept database connection that no longer answers (one SELECT 1).

    Django's CONN_HEALTH_CHECKS would do it before every request's first query, API
    requests included, where that round trip cost more than their own statements.
    API views instead retry once on a new connection when a kept one turns out to
    be broken (core.database.with_live_connection): no round trip while it works.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not is_api_request(request) and connection.connection is not None and not connection.is_usable():
            connection.close()
        return self.get_response(request)


def body_size_problem(request) -> HttpResponse | None:
    """413 payload_too_large for a request whose declared body is over DATA_UPLOAD_MAX_MEMORY_SIZE, before
    anything reads it; None for any other.

    DRF parses from the request stream, which bypasses Django's own size check on
    `request.body`, so the limit is enforced on the declared length.
    """
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if length <= limit:
        return None
    return problem_response(
        status=413,
        code="payload_too_large",
        title="Payload too large",
        detail=f"The request body is {length} bytes; the limit is {limit} bytes.",
    )


class BodySizeLimitMiddleware:
    """Refuse bodies over the limit (body_size_problem) before any view reads them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return body_size_problem(request) or self.get_response(request)


def _mark_database_unavailable(sender, request=None, **kwargs) -> None:
    # Sent from inside Django's `except` block, so sys.exc_info() is the exception.
    if request is not None and is_database_unavailable(sys.exc_info()[1]):
        request.database_unavailable = True


class DatabaseUnavailableMiddleware:
    """Answer 503 `database_unavailable` with Retry-After, never a 500 page, when the database fails
    outside a DRF view (DRF views map it themselves in core/api/exceptions.py).

    A view's exception arrives in process_exception. One raised by a middleware
    (a session saved in process_response, say) is turned into a 500 response by
    Django before it reaches here; got_request_exception marks the request so
    that response is replaced. Reconnecting needs nothing here: at the end of
    the request Django drops a connection that had an error and no longer
    answers, and ConnectionCheckMiddleware or with_live_connection replaces a kept one that broke.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        got_request_exception.connect(
            _mark_database_unavailable, dispatch_uid="core.middleware.guards.database_unavailable"
        )

    def __call__(self, request):
        response = self.get_response(request)
        if getattr(request, "database_unavailable", False):
            return database_unavailable_problem()
        return response

    def process_exception(self, request, exception):
        if not is_database_unavailable(exception):
            return None
        database_unavailable_log(exception, f" on {request.method} {request.path}")
        return database_unavailable_problem(exception)
