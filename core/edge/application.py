"""The WSGI application: the edge's paths answered by their endpoints (answer.py), every other path by
Django's handler. The endpoints' steps are sent on Django's connection (core.steps.steps_run), and the
response handed to the server as Django's WSGI handler hands it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.core.handlers.wsgi import WSGIRequest
from django.core.signals import request_started

from core.edge.answer import EdgeRoutes, Endpoint, edge_answer, response_headers
from core.steps import steps_run

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class EdgeApplication(EdgeRoutes):
    def __init__(
        self, endpoints: Mapping[str, Endpoint], django: WsgiApp, *, prefixes: Mapping[str, Endpoint] | None = None
    ) -> None:
        """The routes of EdgeRoutes, by PATH_INFO; `django` answers the rest."""
        super().__init__(endpoints, prefixes=prefixes)
        self.django = django

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        endpoint = self.endpoint_for(environ.get("PATH_INFO", ""))
        if endpoint is None:
            return self.django(environ, start_response)
        request_started.send(sender=type(self), environ=environ)
        response = steps_run(edge_answer(endpoint, WSGIRequest(environ), vendor=None))
        # As django.core.handlers.wsgi.WSGIHandler hands a response to the server: the server closes it when
        # it is sent, and closing it sends request_finished.
        start_response(f"{response.status_code} {response.reason_phrase}", response_headers(response))
        return response
