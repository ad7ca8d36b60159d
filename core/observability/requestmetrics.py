"""Every request counted and timed by endpoint (core/observability/metrics.py); left out when METRICS_ENABLED is off."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed

from core.observability.metrics import http_request_observe


def endpoint_of(request) -> str:
    """The route's name; the few requests that are answered before routing, by what answered them.

    Never the path itself: any client can send any number of different paths.
    """
    match = getattr(request, "resolver_match", None)
    if match is not None:
        # The staff console's pages are many; one label for all of them.
        return "admin" if match.namespace == "admin" else match.url_name or "unnamed"
    if request.path.startswith(settings.STATIC_URL):
        return "static"
    return "unmatched"


class RequestMetricsMiddleware:
    """After RequestIdMiddleware. The edge's endpoints (core/edge) are counted by the edge."""

    def __init__(self, get_response):
        if not settings.METRICS_ENABLED:
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        http_request_observe(
            endpoint=endpoint_of(request),
            method=request.method,
            status=response.status_code,
            seconds=time.perf_counter() - started,
        )
        return response
