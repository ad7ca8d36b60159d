"""The fast path of a valid API request: the answer Django, DRF and the API's middleware would give, made
without their machinery, or no answer at all and the request left to them.

Most of a small request's CPU in the service is that machinery, not its own work
(bench/run framework: the service's own functions alone cost a third to a half
of what the request costs through Django's handler and every middleware). For a POST to a view that offers it (an
`answer(data)`, as the assignment and link endpoints do), the path here does
what the API's middleware chain and DRF do for a request they accept: the
request started and finished (its ID, the database connections' upkeep), the
HTTPS redirect, host and user-agent checks and every response header
(Django's own security, common and framing middleware, called as they are),
the body size limit, the token from this process's cache with its role, the
body parsed and validated by the view's own parser and serializer, the log line
and the metrics. It declines, before it has done anything a client could see
or count, whatever it would answer with anything but the view's answer: a
missing, unknown, revoked or uncached token, another content type, a body that
does not parse or validate, an HTTPS redirect, a host not allowed. If the view's
answer itself fails (an unknown experiment, a database outage), the request is
left to Django with that failure, which the view raises again instead of doing
the work twice (views.JsonApiView.answered). Either way the answer is the one
Django always gave, and tests/core/test_handlers.py holds the two side by side.

It applies only while settings.API_MIDDLEWARE is the chain it was written for
(API_CHAIN): a middleware added there makes every API request go through
Django until this path does what that middleware does.
"""

from __future__ import annotations

import io
import time
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest, get_script_name
from django.core.signals import request_started
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import Resolver404, resolve, set_script_prefix

from core.api.views import ANSWER_FAILED, JSON_MEDIA_TYPE, JsonApiView
from core.middleware.requestid import REQUEST_ID_HEADER, request_id_current
from core.middleware.requestlog import request_log_noting, request_log_write
from core.observability.metrics import http_request_observe

# settings.API_MIDDLEWARE as this path does it, outermost first.
API_CHAIN = (
    "core.middleware.requestid.RequestIdMiddleware",  # request_started, and the response's header
    "core.middleware.requestlog.RequestLogMiddleware",  # request_log_noting, request_log_write
    "core.observability.requestmetrics.RequestMetricsMiddleware",  # http_request_observe
    "core.middleware.guards.DatabaseUnavailableMiddleware",  # a failed answer is Django's to answer
    "core.middleware.guards.BodySizeLimitMiddleware",  # a body over the limit is declined
    "django.middleware.security.SecurityMiddleware",  # called as it is
    "django.middleware.common.CommonMiddleware",  # called as it is
    "django.middleware.clickjacking.XFrameOptionsMiddleware",  # called as it is
)


class Declined(Exception):
    """The request is Django's to answer."""


def _never(request):
    raise AssertionError("only the middleware's request and response hooks are called")


class FastPath:
    def __init__(self) -> None:
        self.security = SecurityMiddleware(_never)
        self.common = CommonMiddleware(_never)
        self.framing = XFrameOptionsMiddleware(_never)
        # Path -> (view class, route name) or None; only the API's paths come here: two strings a route at most.
        self._routes: dict[str, tuple[type[JsonApiView], str] | None] = {}

    @staticmethod
    def applies() -> bool:
        return tuple(settings.API_MIDDLEWARE) == API_CHAIN

    def respond(self, environ: dict[str, Any], handler_class: type) -> HttpResponse | None:
        """The answer to an API request, or None, with nothing seen or counted, when it is Django's to give
        (its body then put back for Django to read)."""
        if environ.get("REQUEST_METHOD") != "POST":
            return None
        # As Django's handler starts every request: the script prefix, the request ID, the connections' upkeep.
        set_script_prefix(get_script_name(environ))
        request_started.send(sender=handler_class, environ=environ)
        request = WSGIRequest(environ)
        started = time.perf_counter()
        with request_log_noting() as noted:
            try:
                view, route, data, api_token = self._accepted(request)
            except Exception:
                _give_back(request, environ)
                return None
            try:
                response = HttpResponse(view.renderer.render(view.answer(data)), content_type=JSON_MEDIA_TYPE)
                view.authenticators[0].authenticated_use(api_token)
                response["Allow"] = view.allow
                for hook in (self.framing, self.common, self.security):
                    response = hook.process_response(request, response)
            except Exception as failure:
                # Django answers the failure (views.JsonApiView.answered) under this request's ID, which
                # the attempt may have logged with.
                _give_back(request, environ)
                environ[ANSWER_FAILED] = failure
                environ["HTTP_X_REQUEST_ID"] = request_id_current()
                return None
            if settings.METRICS_ENABLED:
                seconds = time.perf_counter() - started
                http_request_observe(endpoint=route, method="POST", status=response.status_code, seconds=seconds)
        request_log_write(method="POST", path=request.path, status=response.status_code, started=started, noted=noted)
        response[REQUEST_ID_HEADER] = request_id_current()
        response._handler_class = handler_class
        response._resource_closers.append(request.close)
        return response

    def _accepted(self, request: WSGIRequest) -> tuple[type[JsonApiView], str, Any, Any]:
        """The view, its route's name, the valid data and the token's snapshot; raises Declined, having done
        nothing anyone sees or counts, for a request only Django answers as it should."""
        found = self._route(request.path_info)
        if found is None:
            raise Declined
        view, route = found
        # A redirect to HTTPS, a host not allowed (DisallowedHost), a user agent refused: Django answers them.
        if self.security.process_request(request) is not None or self.common.process_request(request) is not None:
            raise Declined
        # Exactly application/json: a charset or another type is the parser's and DRF's to weigh.
        if request.META.get("CONTENT_TYPE") != JSON_MEDIA_TYPE:
            raise Declined
        if not 0 < int(request.META.get("CONTENT_LENGTH") or 0) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise Declined
        authenticated = view.authenticators[0].authenticate_cached(request)
        if authenticated is None:
            raise Declined
        user, api_token = authenticated
        caller = SimpleNamespace(user=user, auth=api_token)
        if not all(permission.has_permission(caller, None) for permission in view.permissions):
            raise Declined
        data = view.body.validate(view.parser.parse(io.BytesIO(request.body), JSON_MEDIA_TYPE, {}))
        return view, route, data, api_token

    def _route(self, path_info: str) -> tuple[type[JsonApiView], str] | None:
        if path_info not in self._routes:
            try:
                match = resolve(path_info)
            except Resolver404:
                found = None
            else:
                view = getattr(match.func, "view_class", None)
                found = (view, match.url_name) if getattr(view, "answer", None) is not None else None
            self._routes[path_info] = found
        return self._routes[path_info]


def _give_back(request: WSGIRequest, environ: dict[str, Any]) -> None:
    """The body, if the fast path read it, for Django to read again."""
    if hasattr(request, "_body"):
        environ["wsgi.input"] = io.BytesIO(request._body)
