"""gunicorn as the deployment runs it (devtools.gunicorn), serving one application for one benchmark run.

The command is the README's: `gunicorn -c deploy/gunicorn.conf.py <app>`, every
setting from that file and the environment it reads (GUNICORN_WORKERS, ...).
What it resolves to is asked of gunicorn itself (gunicorn_settings) before each
start, so a result names the worker class, workers and threads it ran with.
A benchmark starts measuring only once every worker has booted and gone idle:
a worker still importing the application would count as load.
"""

from __future__ import annotations

import contextlib
import http.client
import time
from collections.abc import Iterator
from pathlib import Path

from bench.cpu import children_of, process_cpu_seconds
from devtools.gunicorn import Gunicorn, GunicornSettings
from devtools.gunicorn import gunicorn as devtools_gunicorn

MINIMAL_APP = "bench.minimal_app:application"


def worker_pids(server: Gunicorn) -> list[int]:
    return children_of(server.process.pid)


def _wait_until_ready(server: Gunicorn, *, workers: int, timeout: float) -> None:
    """Until every worker has booted: a request that touches no database gets its answer (404), then the
    workers sit idle, so none is still importing the application when the load starts."""
    deadline = time.monotonic() + timeout
    answered = False
    last_cpu = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.process.returncode}")
        pids = worker_pids(server)
        if len(pids) >= workers and not answered:
            connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
            try:
                connection.request("GET", "/bench-ready-probe")
                answered = connection.getresponse().status == 404
            except OSError:
                pass
            finally:
                connection.close()
        if answered:
            cpu = sum(process_cpu_seconds(pids).values())
            if cpu == last_cpu:
                return
            last_cpu = cpu
        time.sleep(0.25)
    raise TimeoutError(f"gunicorn did not answer within {timeout}s")


@contextlib.contextmanager
def gunicorn(*, app: str, env: dict[str, str], settings: GunicornSettings, log_path: Path) -> Iterator[Gunicorn]:
    """gunicorn serving `app` on a free port, ready and idle; its output appended to log_path. `settings`
    are gunicorn_settings' for the same app and env. Stopping waits up to 40 s: a worker finishing a
    1000-subject batch under load takes its time."""
    with devtools_gunicorn(
        env=env,
        log_path=log_path,
        app=app,
        ready=lambda server: _wait_until_ready(server, workers=settings.workers, timeout=60),
        stop_timeout=40,
    ) as server:
        yield server
