"""gunicorn settings: the service runs as `gunicorn -c deploy/gunicorn.conf.py`, nothing else on the command line
(docs/how-to/deploy.md); `-b` and `-w` there override GUNICORN_BIND and GUNICORN_WORKERS.

uvicorn's workers (deploy/workers.py) serving the ASGI application: they keep idle client connections
open, which the proxy in deploy/proxy/ reuses (keepalive), and answer the hot paths on their event loop.
Every value comes from the environment, read by config/env.py, so a malformed one stops start-up naming it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config.env import env_bool, env_int, env_networks, env_str
from core.observability.metricsfiles import metrics_directory_clean, metrics_directory_prepare, worker_files_fold

# The application; an application named on the command line (a benchmark's minimal app) overrides it.
wsgi_app = "config.asgi:application"
# Set before the application is loaded: the web server's database connections, and only theirs, get the
# statement and lock timeouts (config/settings.py).
raw_env = ["DATABASE_REQUEST_TIMEOUTS=true"]
bind = env_str("GUNICORN_BIND", "127.0.0.1:8000")
# One process per core (at least two, so a recycled or crashed worker never leaves none):
# the event loop already overlaps the waits for PostgreSQL, and more processes than cores
# only contend for them.
workers = env_int("GUNICORN_WORKERS", max(2, os.cpu_count() or 1), minimum=1, maximum=256)
# uvicorn's, with gunicorn's request limits and its own refusals as problem+json (deploy/workers.py).
worker_class = env_str("GUNICORN_WORKER_CLASS", "deploy.workers.ServiceWorker")
# A request that runs longer than this is a bug or a hung database: the worker is replaced.
timeout = env_int("GUNICORN_TIMEOUT", 30, minimum=1)
graceful_timeout = env_int("GUNICORN_GRACEFUL_TIMEOUT", 30, minimum=1)
# Longer than the proxy's upstream keepalive_timeout (60 s), so the proxy, not gunicorn,
# closes an idle connection, and never sends a request on one gunicorn is closing.
keepalive = env_int("GUNICORN_KEEPALIVE", 75, minimum=0)
# Recycle workers now and then (jittered, so not all at once) to bound slow memory growth. Once in a
# million requests: a worker answers thousands a second, and one replaced every 10,000 was replaced every
# one to five seconds under load, each time closing its connections, which cost /healthz a fifth of its
# throughput and put its p99 at 116 to 370 ms; a worker's memory stayed flat over 250,000 requests without
# it (bench/results/history.md, "Worker recycling").
max_requests = env_int("GUNICORN_MAX_REQUESTS", 1_000_000, minimum=0)
max_requests_jitter = env_int("GUNICORN_MAX_REQUESTS_JITTER", 100_000, minimum=0)
# The application is imported once, in the master, and every worker is forked from it
# (config/wsgi.py imports the URLs, views and their schema up front). A worker that
# replaces a recycled one then answers at once: without it, its first requests wait
# 2 to 3 s for Django's lazy imports. No database connection is opened before the fork.
preload_app = env_bool("GUNICORN_PRELOAD", True)
limit_request_line = 4094
# gunicorn's runtime control socket defaults to one shared path per user ($HOME/.gunicorn/gunicorn.ctl),
# which a second instance on the host would take over; this service is managed by its supervisor instead.
control_socket_disable = True
limit_request_fields = 100

# Whether a request came over HTTPS (for Django: request.is_secure(), so the HTTPS redirect, HSTS, the
# admin's CSRF checks) is gunicorn's wsgi.url_scheme alone; config/settings.py gives Django no proxy header,
# which Django would believe from any peer. gunicorn's defaults would believe three such headers from
# loopback, where any local process connects, not only the proxy; here only X-Forwarded-Proto, only with
# TRUST_X_FORWARDED_PROTO on, and only from the proxy's addresses. A header from another peer is ignored.
if env_bool("TRUST_X_FORWARDED_PROTO", False):
    secure_scheme_headers = {"X-FORWARDED-PROTO": "https"}
    forwarded_allow_ips = ",".join(env_networks("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1,::1"))
else:
    # Both emptied: gunicorn trusts a unix socket's peer whatever forwarded_allow_ips says.
    secure_scheme_headers = {}
    forwarded_allow_ips = ""
# Nor may a trusted peer set SCRIPT_NAME: the service is mounted at the root, and the proxy sends none.
forwarder_headers = ""

# Off unless GUNICORN_ACCESS_LOG=true: the proxy in front (deploy/proxy/) logs every request,
# with its status and time, the service writes a line per request of its own (core/middleware/requestlog.py),
# and gunicorn's line for the same request took about 10% of a worker's CPU on one-subject requests
# (bench/results/summary.md).
accesslog = "-" if env_bool("GUNICORN_ACCESS_LOG", False) else None
errorlog = "-"
# The client address the proxy saw is in X-Forwarded-For; tokens and bodies are never logged.
access_log_format = '%(h)s xff=%({x-forwarded-for}i)s "%(r)s" %(s)s %(B)s %(M)sms "%(a)s"'

# Metrics (docs/reference/metrics-and-logs.md): each worker counts into files of its own in
# PROMETHEUS_MULTIPROC_DIR, and a scrape of any worker adds up every worker's. Without the variable, a
# directory of this server's own. Set here, before the application is loaded: prometheus_client picks where
# it counts when first imported.
metrics_directory = metrics_directory_prepare() if env_bool("METRICS_ENABLED", True) else None


def on_starting(server):
    if metrics_directory is not None:
        metrics_directory_clean(metrics_directory)


def child_exit(server, worker):
    if metrics_directory is not None:
        worker_files_fold(metrics_directory, worker.pid)
