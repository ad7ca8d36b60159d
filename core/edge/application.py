"""The WSGI application: the edge's paths answered by their endpoints, every other path by Django's handler.

For a request to one of its paths the edge does what Django's handler and the
service's outer middleware do for it, through their public pieces: the request
started and finished by Django's signals (the request ID, the database
connections' upkeep), the body size limit, Django's security, common and framing
middleware (middleware.django_chain), Django's log line for an error answer, the
request's own log line and metrics, and the response handed to the server as
Django's WSGI handler hands it. Which path goes where is decided once, by the path
alone, before either side starts: no request is begun on one side and replayed on
the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.core.signals import request_started
from django.http import HttpRequest, HttpResponse
from django.utils.log import log_response

from core.middleware.guards import body_size_problem
from core.middleware.requestid import REQUEST_ID_HEADER, request_id_current
from core.middleware.requestlog import request_log_noting, request_log_write
from core.observability.metrics import http_request_observe

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Endpoint(Protocol):
    # The metrics' endpoint label: the route's name.
    name: str
    # Whether the edge refuses an oversized body before the endpoint runs; False: the endpoint does, after
    # authentication (the OpenFeature paths, whose callers are told of a bad token first).
    body_limited: bool

    def respond(self, request: HttpRequest) -> HttpResponse:
        """The answer to any request to the endpoint's paths; raises nothing."""


class EdgeApplication:
    def __init__(
        self, endpoints: Mapping[str, Endpoint], django: WsgiApp, *, prefixes: Mapping[str, Endpoint] | None = None
    ) -> None:
        """`endpoints` by path (PATH_INFO, each spelling the endpoint answers); `prefixes` the endpoints of
        the paths below a prefix (a path with a parameter), for the paths `endpoints` does not name;
        `django` answers the rest."""
        self.endpoints = dict(endpoints)
        self.prefixes = tuple((prefixes or {}).items())
        self.django = django

    def endpoint_for(self, path: str) -> Endpoint | None:
        endpoint = self.endpoints.get(path)
        if endpoint is None:
            for prefix, below in self.prefixes:
                if path.startswith(prefix):
                    return below
        return endpoint

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        endpoint = self.endpoint_for(environ.get("PATH_INFO", ""))
        if endpoint is None:
            return self.django(environ, start_response)
        request_started.send(sender=type(self), environ=environ)
        started = time.perf_counter()
        with request_log_noting() as noted:
            request = WSGIRequest(environ)
            response = (endpoint.body_limited and body_size_problem(request)) or endpoint.respond(request)
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
        # As django.core.handlers.wsgi.WSGIHandler hands a response to the server: the server closes it when
        # it is sent, and closing it sends request_finished.
        start_response(
            f"{response.status_code} {response.reason_phrase}",
            [*response.items(), *(("Set-Cookie", cookie.output(header="")) for cookie in response.cookies.values())],
        )
        return response
