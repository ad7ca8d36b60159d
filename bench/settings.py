"""Bench-only settings: config.settings with the connection handling named by BENCH_DB_CONNECTIONS.

Only gunicorn started by the rounds (bench/rounds.py) for a `--connections`
variation uses this module (the default, `deployment`, runs config.settings
itself); the product's settings stay the single source of everything else.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from bench.connections import CONNECTION_MODES, database_settings_for
from config.settings import *  # noqa: F403
from config.settings import DATABASES

BENCH_DB_CONNECTIONS = os.environ.get("BENCH_DB_CONNECTIONS", "deployment")
if BENCH_DB_CONNECTIONS not in CONNECTION_MODES:
    raise ImproperlyConfigured(
        f"BENCH_DB_CONNECTIONS must be one of {', '.join(CONNECTION_MODES)}, got {BENCH_DB_CONNECTIONS!r}"
    )
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("the benchmark runs on PostgreSQL: set DATABASE_URL=postgres://...")
# bench/rounds.py passes the threads per worker that deploy/gunicorn.conf.py resolves to, which size the pool.
BENCH_THREADS = int(os.environ.get("BENCH_THREADS", "1"))
DATABASES = {"default": database_settings_for(BENCH_DB_CONNECTIONS, DATABASES["default"], threads=BENCH_THREADS)}
