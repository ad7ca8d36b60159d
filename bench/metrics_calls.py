"""The counting calls of one request, timed in one process: what bench/run metrics measures over HTTP, without
the noise of a shared machine.

`.venv/bin/python -m bench.metrics_calls` runs each metrics call (core/observability/metrics.py and the
apps' metrics.py) that a request makes, in prometheus_client's multi-process mode (a fresh
PROMETHEUS_MULTIPROC_DIR, as under gunicorn), many times over, and prints the best
of five rounds in microseconds per call, and per request of each kind; and, to
compare, the request's log line (core/middleware/requestlog.py), formatted as JSON and
written to /dev/null.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import timeit

CALLS_PER_ROUND = 20_000
ROUNDS = 5


def main(argv: list[str]) -> int:
    argparse.ArgumentParser(prog="bench/run metrics-calls", description=__doc__.split("\n\n")[0]).parse_args(argv)
    # Before prometheus_client is imported: it picks where it counts then.
    with tempfile.TemporaryDirectory(prefix="bench-metrics-calls-") as directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        return _measure()


def _measure() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-metrics-calls-not-secret")
    import django

    django.setup()
    from assignments import metrics as assignment_metrics
    from core.observability import metrics
    from tokens import metrics as token_metrics

    calls = {
        "request counted and timed (every request)": lambda: metrics.http_request_observe(
            endpoint="experiment-assignments", method="POST", status=200, seconds=0.01
        ),
        "token cache lookup (every request with a token)": lambda: token_metrics.api_token_cache_lookup(hit=True),
        "assignments created (a request that stores any)": lambda: assignment_metrics.assignments_created(
            experiment="checkout-button", source="hashed", count=1
        ),
        "health check (GET /healthz)": lambda: metrics.healthz_checked(ok=True),
    }
    costs = {
        name: min(timeit.repeat(call, number=CALLS_PER_ROUND, repeat=ROUNDS)) / CALLS_PER_ROUND * 1e6
        for name, call in calls.items()
    }
    for name, microseconds in costs.items():
        print(f"{microseconds:6.2f} µs  {name}")
    request, token, created, health = costs.values()
    print(f"{request + token + created:6.2f} µs  per new assignment request (POST /experiment-assignments, 1-new)")
    print(f"{request + health:6.2f} µs  per GET /healthz")

    handler = next(handler for handler in logging.getLogger("config.requestlog").handlers)
    with open(os.devnull, "w") as devnull:
        handler.setStream(devnull)
        fields = {
            "method": "POST",
            "path": "/experiment-assignments",
            "status": 200,
            "duration_ms": 1.23,
            "experiment": "checkout-button",
            "batch_size": 1,
            "token_name": "bench",
        }
        line = min(
            timeit.repeat(
                lambda: logging.getLogger("config.requestlog").info("POST /experiment-assignments 200", extra=fields),
                number=CALLS_PER_ROUND,
                repeat=ROUNDS,
            )
        )
    print(f"{line / CALLS_PER_ROUND * 1e6:6.2f} µs  to compare: the request's log line (JSON, to /dev/null)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
