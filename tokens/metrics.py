"""The token cache's counter, on the service's one registry (core/observability/metrics.py)."""

from __future__ import annotations

from django.conf import settings
from prometheus_client import Counter

from core.observability.metrics import REGISTRY

API_TOKEN_CACHE_LOOKUPS = Counter(
    "api_token_cache_lookups_total",
    "Well-formed tokens looked up, by result: hit (found in the process's cache) or miss (read from the database).",
    ["result"],
    registry=REGISTRY,
)


def api_token_cache_lookup(*, hit: bool) -> None:
    if settings.METRICS_ENABLED:
        API_TOKEN_CACHE_LOOKUPS.labels("hit" if hit else "miss").inc()
