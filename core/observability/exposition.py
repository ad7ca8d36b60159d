"""GET /metrics: the metrics on the registry of core/observability/metrics.py in Prometheus' text format, for
`admin` tokens only (docs/reference/metrics-and-logs.md). Never forwarded by the proxy (deploy/proxy/render refuses to
publish it)."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from core.api.schema import ProblemDoc, problem_responses
from core.api.views import JsonApiView
from core.observability.metrics import REGISTRY
from core.observability.metricsfiles import directory_locked, metrics_directory

METRICS_DISABLED = ProblemDoc(
    "`METRICS_ENABLED` is off: nothing is counted.", "not_found", "Not found", "No such resource."
)


class MetricsApi(JsonApiView):
    """Every worker's counts added up under gunicorn (their files in PROMETHEUS_MULTIPROC_DIR), this
    process's elsewhere. The permission is the default one: `admin` tokens only."""

    _collector_registry: CollectorRegistry | None = None

    @classmethod
    def _registry(cls, directory) -> CollectorRegistry:
        if cls._collector_registry is None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(directory))
            cls._collector_registry = registry
        return cls._collector_registry

    @extend_schema(
        operation_id="metrics",
        summary="The service's metrics, for Prometheus",
        description="Role: `admin`. Prometheus' text exposition format (OpenMetrics when the `Accept` header "
        "asks for it): request counts and latencies by endpoint, assignments created, conflicts lost, "
        "database outages, token cache lookups and health checks (docs/reference/metrics-and-logs.md). "
        "Never through the authenticating proxy.",
        responses={
            (200, "text/plain"): OpenApiResponse(
                response=OpenApiTypes.STR,
                description="One sample per line, `# HELP` and `# TYPE` before each metric.",
            ),
            **problem_responses(401, 403, 500, 503, specific={404: METRICS_DISABLED}),
        },
    )
    def get(self, request):
        if not settings.METRICS_ENABLED:
            raise Http404
        encoder, content_type = choose_encoder(request.META.get("HTTP_ACCEPT", ""))
        directory = metrics_directory()
        if directory is None:
            body = encoder(REGISTRY)
        else:
            # Not while the master folds a stopped worker's files (core/observability/metricsfiles.py).
            with directory_locked(directory, exclusive=False):
                body = encoder(self._registry(directory))
        return HttpResponse(body, content_type=content_type)
