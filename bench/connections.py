"""The database connection handlings the benchmark can run the service with.

`deployment` is config.settings itself, untouched: the service runs with the
product's settings module, as deployed. Every other mode is a variation, a set
of overrides of config.settings' DATABASES["default"] that bench/settings.py
applies when gunicorn runs with DJANGO_SETTINGS_MODULE=bench.settings and
BENCH_DB_CONNECTIONS naming the mode. Kept free of Django so the command line
can list and check modes before anything starts.
"""

from __future__ import annotations

from typing import Any

POOL = object()  # stands for the pool options, which depend on the threads per worker

DEPLOYMENT = "deployment"

CONNECTION_MODES: dict[str, dict[str, Any]] = {
    # config.settings as it stands.
    DEPLOYMENT: {},
    # Django 5.2's psycopg pool; it refuses CONN_MAX_AGE other than 0.
    "pool": {"CONN_MAX_AGE": 0, "OPTIONS": {"pool": POOL}},
    # A new connection for every request: what both of the above avoid.
    "per-request": {"CONN_MAX_AGE": 0},
}

DEFAULT_MODES = (DEPLOYMENT,)


def pool_options(threads: int) -> dict[str, int]:
    """As many connections as a worker has threads, the most it can use at once, opened on demand.

    psycopg_pool's default min_size (4) would open connections a sync worker never uses.
    """
    return {"min_size": 1, "max_size": threads, "timeout": 5}


def database_settings_for(mode: str, default: dict[str, Any], *, threads: int) -> dict[str, Any]:
    """A copy of the DATABASES entry `default` with the mode's overrides; OPTIONS are merged."""
    overrides = CONNECTION_MODES[mode]
    merged = {**default, **{key: value for key, value in overrides.items() if key != "OPTIONS"}}
    options = {
        key: pool_options(threads) if value is POOL else value for key, value in overrides.get("OPTIONS", {}).items()
    }
    merged["OPTIONS"] = {**default.get("OPTIONS", {}), **options}
    return merged
