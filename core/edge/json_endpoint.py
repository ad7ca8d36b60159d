"""A JSON API endpoint at the edge: what DRF's APIView.dispatch does for one of the API's views, in its order,
with the view's own declarations and DRF's own exceptions.

The view (core.api.views.JsonApiView) declares the endpoint once: its
authentication, permissions, parser, renderer, request body and `answer_steps(data)`.
DRF serves it from the URLconf for the schema (and tests/core/edge/
test_json_endpoint.py holds the two answers equal); the edge serves it in
production, leaving out what costs a small request most and does nothing for
these views: DRF's Request wrapper, content negotiation (one renderer), the
throttles (none) and the per-request construction of the view, its parsers,
authenticators and permissions. Every failure is answered by the API's problem
table (core/api/exceptions.py), as DRF's exception handler answers it. The answer is
steps (core/steps.py), for the edge's driver to send: on Django's connection
(application.py) or on the event loop's (asgi.py).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from rest_framework import exceptions

from core.api.exceptions import problem_exception_handler
from core.api.views import JSON_MEDIA_TYPE, JsonApiView, json_required
from core.edge.middleware import django_chain
from core.middleware.guards import body_size_problem
from core.steps import Steps


class JsonEndpoint:
    def __init__(
        self,
        view_class: type[JsonApiView],
        *,
        name: str,
        arguments: Callable[[HttpRequest], dict[str, str]] | None = None,
        body_limited: bool = True,
    ) -> None:
        """`arguments`: the keyword arguments of the view's `answer_steps` taken from the request's path, as the
        URLconf's pattern gives them to DRF's view (for a path with a parameter). `body_limited`: the edge
        refuses an oversized body before the endpoint runs (application.py); False: the endpoint refuses it
        itself, once the caller is authenticated."""
        self.name = name
        self.body_limited = body_limited
        self.view = view_class()
        self.vendor = self.view.vendor
        self.arguments = arguments
        # DRF's answer to OPTIONS, the same for every request: SimpleMetadata reads only the view.
        self.metadata = self.view.metadata_class().determine_metadata(None, self.view)
        self.respond = django_chain(self.dispatch)

    def dispatch(self, request: HttpRequest, *, vendor: str | None) -> Steps[HttpResponse]:
        """The answer before Django's middleware (django_chain) has its turn, its statements in the form
        `vendor` takes (JsonApiView.answer_steps)."""
        view = self.view
        try:
            response = yield from self._handled(request, vendor)
        except Exception as exc:
            response = problem_exception_handler(exc, {"view": view, "request": request})
            if response is None:
                raise
        # As APIView.finalize_response adds the view's default headers.
        response["Allow"] = view.allow
        return response

    def _handled(self, request: HttpRequest, vendor: str | None) -> Steps[HttpResponse]:
        view = self.view
        caller = yield from self._authenticated(request)
        for permission in view.permissions:
            if not permission.has_permission(caller, view):
                if caller.auth is None:
                    raise exceptions.NotAuthenticated()
                raise exceptions.PermissionDenied(getattr(permission, "message", None))
        if request.method == "POST":
            if not self.body_limited:
                too_large = body_size_problem(request)
                if too_large is not None:
                    return too_large
            data = view.body.validate(self._data(request))
            arguments = {} if self.arguments is None else self.arguments(request)
            answer = yield from view.answer_steps(data, vendor=vendor or view.vendor(), **arguments)
            return HttpResponse(view.renderer.render(answer), content_type=JSON_MEDIA_TYPE)
        if request.method == "OPTIONS":
            return HttpResponse(view.renderer.render(self.metadata), content_type=JSON_MEDIA_TYPE)
        raise exceptions.MethodNotAllowed(request.method)

    def _authenticated(self, request: HttpRequest) -> Steps[Any]:
        """The caller as the permissions see it (`user`, `auth`), as DRF's Request authenticates: the first
        authenticator that answers, or nobody. Each authenticator's check as steps (authenticate_steps)."""
        for authenticator in self.view.authenticators:
            found = yield from authenticator.authenticate_steps(request)
            if found is not None:
                return SimpleNamespace(user=found[0], auth=found[1])
        return SimpleNamespace(user=None, auth=None)

    def _data(self, request: HttpRequest) -> Any:
        """The body as DRF's Request.data reads it for these views: only JSON (JsonApiView.initial), an empty
        body as {}, the stream parsed by the view's parser in the request's charset."""
        json_required(request.META.get("CONTENT_TYPE", request.META.get("HTTP_CONTENT_TYPE", "")))
        try:
            length = int(request.META.get("CONTENT_LENGTH", request.META.get("HTTP_CONTENT_LENGTH", 0)))
        except (ValueError, TypeError):
            length = 0
        if length == 0:
            return {}
        encoding = request.encoding or settings.DEFAULT_CHARSET
        return self.view.parser.parse(request, JSON_MEDIA_TYPE, {"encoding": encoding})
