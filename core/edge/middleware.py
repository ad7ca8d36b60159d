"""settings.MIDDLEWARE as the edge does it, entry by entry.

The edge does not run the middleware chain Django builds from settings. It runs
three of Django's own middleware around its endpoints, as Django would, and does
the work of the service's own (their functions, called from application.py);
the rest have nothing to do for its paths. ACCOUNTED says which is which for
every entry, and tests/core/edge/test_middleware.py fails when settings.MIDDLEWARE
and ACCOUNTED differ: a middleware added for any reason must be placed here
before the hot endpoints pass it by.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.handlers.exception import response_for_exception
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware

from core.steps import Steps

RUN_AS_IT_IS = "run as it is, in this order, around the endpoint (django_chain)"
ACCOUNTED = {
    "core.middleware.requestid.RequestIdMiddleware": "the request ID chosen on request_started and sent back "
    "(application.py)",
    "core.middleware.requestlog.RequestLogMiddleware": "the request's log line (application.py)",
    "core.observability.requestmetrics.RequestMetricsMiddleware": "the request counted and timed by endpoint "
    "(application.py)",
    "core.middleware.guards.DatabaseUnavailableMiddleware": "a failure of the endpoint is answered by the problem "
    "table (core/api/exceptions.py), which answers a database failure 503 database_unavailable",
    "core.middleware.guards.BodySizeLimitMiddleware": "the body size limit, first (application.py)",
    "django.middleware.security.SecurityMiddleware": RUN_AS_IT_IS,
    "whitenoise.middleware.WhiteNoiseMiddleware": "serves static files, none of which is at the edge's paths",
    "core.middleware.guards.ConnectionCheckMiddleware": "staff pages only: the endpoints retry once on a new "
    "connection instead (core.database.with_live_connection)",
    "core.middleware.staffonly.StaffOnlySessionMiddleware": "the staff console's: no endpoint reads a session",
    "django.middleware.common.CommonMiddleware": RUN_AS_IT_IS,
    "django.middleware.csrf.CsrfViewMiddleware": "every API view is exempt from CSRF",
    "core.middleware.staffonly.StaffOnlyAuthenticationMiddleware": "the staff console's: callers are tokens",
    "core.middleware.staffonly.StaffOnlyMessageMiddleware": "the staff console's",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": RUN_AS_IT_IS,
    "axes.middleware.AxesMiddleware": "acts on a refused staff sign-in only",
}


# Outermost first, as in settings.MIDDLEWARE.
DJANGO_LAYERS = (SecurityMiddleware, CommonMiddleware, XFrameOptionsMiddleware)

EndpointSteps = Callable[..., Steps[HttpResponse]]


def django_chain(view: EndpointSteps, *, layers: tuple[type, ...] = DJANGO_LAYERS) -> EndpointSteps:
    """`view`'s steps behind Django's security, common and framing middleware: each layer's
    process_request and process_response called as MiddlewareMixin.__call__ calls them, each layer wrapped as
    Django's handler wraps it (convert_exception_to_response). A host not allowed is answered 400 by
    CommonMiddleware's layer, an unexpected failure 500 with Django's log line, and both go out through the
    layers above. The hooks are called here rather than through the layers' __call__ because the view's
    steps yield to a driver (core/steps.py), which a call through the chain could not. `layers` empty: only
    the handler's conversion of a failure to an answer."""
    # The layers' own get_response is never called: the chain is walked here.
    instances = tuple(layer(view) for layer in layers)
    requests = tuple((layer, getattr(layer, "process_request", None)) for layer in instances)
    responses = {layer: getattr(layer, "process_response", None) for layer in instances}

    def respond(request: HttpRequest, **arguments: Any) -> Steps[HttpResponse]:
        # The layers entered, whose process_response the answer passes through, innermost last.
        entered = []
        response = None
        for layer, process_request in requests:
            try:
                response = process_request(request) if process_request is not None else None
            except Exception as exc:
                # Converted by this layer's wrapper: its own process_response does not run.
                response = response_for_exception(request, exc)
                break
            entered.append(layer)
            if response is not None:
                break
        else:
            try:
                response = yield from view(request, **arguments)
            except Exception as exc:
                response = response_for_exception(request, exc)
        for layer in reversed(entered):
            process_response = responses[layer]
            if process_response is not None:
                try:
                    response = process_response(request, response)
                except Exception as exc:
                    response = response_for_exception(request, exc)
        return response

    return respond
