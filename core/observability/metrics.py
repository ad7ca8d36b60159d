"""The service's one Prometheus registry, its request, outage and health metrics and the calls that move
them (docs/reference/metrics-and-logs.md). Each app declares its own metrics on REGISTRY (assignments/metrics.py,
tokens/metrics.py).

Under gunicorn each worker writes its counts to files of its own in
PROMETHEUS_MULTIPROC_DIR (prometheus_client's multi-process mode, which
deploy/gunicorn.conf.py sets up; core/observability/metricsfiles.py keeps the directory) and
a scrape of any worker adds up every worker's files. Elsewhere (tests, manage.py)
the counts live in the process. Every label takes a bounded set of values: an
endpoint is a route's name, an experiment a configured experiment's ID, a method
one of the standard ones; never a subject ID, a token or anything else a client
chooses. With METRICS_ENABLED off nothing is counted.
"""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Only the service's metrics: the same in one process and under gunicorn, where the
# process and garbage-collector collectors of the default registry could not be added up.
REGISTRY = CollectorRegistry()

HTTP_REQUESTS = Counter(
    "http_requests_total",
    "Requests answered, by endpoint (route name), method and status.",
    ["endpoint", "method", "status"],
    registry=REGISTRY,
)
HTTP_REQUEST_DURATION = Histogram(
    "http_request_duration_seconds",
    "Time from the request reaching the application to its response, by endpoint.",
    ["endpoint"],
    # From /healthz's millisecond to a 1000-subject batch under load (docs/explanation/performance.md).
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
DATABASE_UNAVAILABLE = Counter(
    "database_unavailable_total",
    "503 database_unavailable answers, by reason: unreachable (no connection, or it broke) or timeout "
    "(a statement or lock timeout).",
    ["reason"],
    registry=REGISTRY,
)
HEALTHZ_CHECKS = Counter(
    "healthz_checks_total",
    "GET and HEAD /healthz answered, by result: ok (200) or unavailable (503).",
    ["result"],
    registry=REGISTRY,
)
HEALTHZ_DATABASE_UP = Gauge(
    "healthz_database_up",
    "1 if the latest /healthz found the database answering, 0 if not.",
    registry=REGISTRY,
    multiprocess_mode="livemostrecent",
)

# A client may send any method name: the others are counted together.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


# A metric's labels() checks the values and looks the child up under a lock, at every call: each request's
# children are kept here instead. Every label's values are bounded (a method outside METHODS is "other"), and
# so are these.
@functools.cache
def _request_children(endpoint: str, method: str, status: int) -> tuple[Any, Any]:
    return (
        HTTP_REQUESTS.labels(endpoint, method, str(status)),
        HTTP_REQUEST_DURATION.labels(endpoint),
    )


@functools.cache
def _healthz_child(ok: bool) -> Any:
    return HEALTHZ_CHECKS.labels("ok" if ok else "unavailable")


def http_request_observe(*, endpoint: str, method: str, status: int, seconds: float) -> None:
    """Called by core.observability.requestmetrics.RequestMetricsMiddleware, which is left out when metrics are off."""
    requests, duration = _request_children(endpoint, method if method in METHODS else "other", status)
    requests.inc()
    duration.observe(seconds)


def database_unavailable_answered(*, timeout: bool) -> None:
    if settings.METRICS_ENABLED:
        DATABASE_UNAVAILABLE.labels("timeout" if timeout else "unreachable").inc()


def healthz_checked(*, ok: bool) -> None:
    if settings.METRICS_ENABLED:
        _healthz_child(ok).inc()
        HEALTHZ_DATABASE_UP.set(1 if ok else 0)
