"""What the edge does around each of its endpoints, whichever server interface brought the request: the
routes by path, and the request's body limit, log line, metrics and ID (application.py for WSGI, asgi.py
for ASGI, each sending the steps with its own driver).

For a request to one of its paths the edge does what Django's handler and the
service's outer middleware do for it, through their public pieces: the body size
limit, Django's security, common and framing middleware (middleware.django_chain,
in each endpoint), Django's log line for an error answer, the request's own log
line and metrics, and the request ID (chosen before: on Django's request_started
signal under WSGI, by request_id_begin on the event loop). Which path goes where is decided once, by the path
alone, before either side starts: no request is begun on one side and replayed on
the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.log import log_response

from core.middleware.guards import body_size_problem
from core.middleware.requestid import REQUEST_ID_HEADER, request_id_current
from core.middleware.requestlog import request_log_noting, request_log_write
from core.observability.metrics import http_request_observe
from core.steps import Steps


class Endpoint(Protocol):
    # The metrics' endpoint label: the route's name.
    name: str
    # Whether the edge refuses an oversized body before the endpoint runs; False: the endpoint does, after
    # authentication (the OpenFeature paths, whose callers are told of a bad token first).
    body_limited: bool
    # The form its statements take on Django's connection (JsonApiView.vendor); None: it sends none.
    vendor: Callable[[], str] | None

    def respond(self, request: HttpRequest, *, vendor: str | None) -> Steps[HttpResponse]:
        """The answer to any request to the endpoint's paths, as steps (core/steps.py), their statements in
        the form `vendor` takes (None: the one `self.vendor()` says, asked as the answer's first need of
        the database); raises nothing."""


class EdgeRoutes:
    def __init__(self, endpoints: Mapping[str, Endpoint], *, prefixes: Mapping[str, Endpoint] | None = None) -> None:
        """`endpoints` by path (each spelling the endpoint answers); `prefixes` the endpoints of the paths
        below a prefix (a path with a parameter), for the paths `endpoints` does not name."""
        self.endpoints = dict(endpoints)
        self.prefixes = tuple((prefixes or {}).items())

    def endpoint_for(self, path: str) -> Endpoint | None:
        endpoint = self.endpoints.get(path)
        if endpoint is None:
            for prefix, below in self.prefixes:
                if path.startswith(prefix):
                    return below
        return endpoint

    def all(self) -> list[Endpoint]:
        """Every endpoint, once."""
        return list(
            {id(endpoint): endpoint for endpoint in [*self.endpoints.values(), *dict(self.prefixes).values()]}.values()
        )


def edge_answer(endpoint: Endpoint, request: HttpRequest, *, vendor: str | None) -> Steps[HttpResponse]:
    """The endpoint's answer to a request whose ID is chosen, with its log line, metrics and ID; the interface
    hands it to the server."""
    started = time.perf_counter()
    with request_log_noting() as noted:
        response = (endpoint.body_limited and body_size_problem(request)) or (
            yield from endpoint.respond(request, vendor=vendor)
        )
        if settings.METRICS_ENABLED:
            seconds = time.perf_counter() - started
            http_request_observe(
                endpoint=endpoint.name, method=request.method, status=response.status_code, seconds=seconds
            )
    request_log_write(
        method=request.method, path=request.path, status=response.status_code, started=started, noted=noted
    )
    if response.status_code >= 400:
        # As Django's handler logs every error answer, after the middleware (django.request, "Bad Request: /path").
        log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
    response[REQUEST_ID_HEADER] = request_id_current()
    return response


def response_headers(response: HttpResponse) -> list[tuple[str, str]]:
    """The response's header lines, its cookies' included, as Django's handlers hand them to a server."""
    return [*response.items(), *(("Set-Cookie", cookie.output(header="")) for cookie in response.cookies.values())]
