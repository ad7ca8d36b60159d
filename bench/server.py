"""gunicorn as the deployment runs it, serving one application for one benchmark run.

The command is the README's: `gunicorn -c deploy/gunicorn.conf.py <app>`, every
setting from that file and the environment it reads (GUNICORN_BIND,
GUNICORN_WORKERS, ...). What it resolves to is asked of gunicorn itself
(`--print-config`) before each start, so a result names the worker class,
workers and threads it ran with even while someone tunes the file.
"""

from __future__ import annotations

import contextlib
import http.client
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.cpu import children_of, process_cpu_seconds

PROJECT_DIR = Path(__file__).resolve().parent.parent
GUNICORN_CONFIG = PROJECT_DIR / "deploy" / "gunicorn.conf.py"
SERVICE_APP = "config.wsgi:application"
MINIMAL_APP = "bench.minimal_app:application"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class GunicornSettings:
    """The settings of deploy/gunicorn.conf.py that shape the load, as gunicorn resolves them."""

    worker_class: str
    workers: int
    threads: int
    keepalive: int
    max_requests: int
    preload_app: bool
    access_log: bool


def _command(app: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONFIG), *options, app]


def gunicorn_settings(*, app: str, env: dict[str, str]) -> GunicornSettings:
    """What `gunicorn -c deploy/gunicorn.conf.py app` would run with in `env` (it loads the app to check it)."""
    printed = subprocess.run(
        _command(app, "--print-config"), cwd=PROJECT_DIR, env=env, capture_output=True, text=True, check=False
    )
    if printed.returncode != 0:
        raise RuntimeError(f"gunicorn --print-config failed:\n{printed.stdout[-2000:]}{printed.stderr[-2000:]}")
    lines = (line.partition("=") for line in printed.stdout.splitlines())
    values = {name.strip(): value.strip() for name, _, value in lines}
    threads = int(values["threads"])
    worker_class = values["worker_class"]
    # gunicorn's own rule (Config.worker_class_str): sync workers given threads run as gthread ones.
    if worker_class in ("sync", "gunicorn.workers.sync.SyncWorker") and threads > 1:
        worker_class = "gthread"
    return GunicornSettings(
        worker_class=worker_class,
        workers=int(values["workers"]),
        threads=threads,
        keepalive=int(values["keepalive"]),
        max_requests=int(values["max_requests"]),
        preload_app=values["preload_app"] == "True",
        access_log=values["accesslog"] != "None",
    )


@dataclass
class Server:
    host: str
    port: int
    process: subprocess.Popen

    def worker_pids(self) -> list[int]:
        return children_of(self.process.pid)


def _wait_until_ready(server: Server, *, workers: int, timeout: float) -> None:
    """Until every worker has booted: a request that touches no database gets its answer (404), then the
    workers sit idle, so none is still importing the application when the load starts."""
    deadline = time.monotonic() + timeout
    answered = False
    last_cpu = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.process.returncode}")
        pids = server.worker_pids()
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
def gunicorn(*, app: str, env: dict[str, str], settings: GunicornSettings, log_path: Path) -> Iterator[Server]:
    """gunicorn serving `app` on a free port with deploy/gunicorn.conf.py; its output (error log, and the
    access log if the config turns it on) is appended to log_path. `settings` are gunicorn_settings' for
    the same app and env."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        process = subprocess.Popen(
            _command(app),
            cwd=PROJECT_DIR,
            env={**env, "GUNICORN_BIND": f"127.0.0.1:{port}"},
            stdout=log,
            stderr=log,
        )
    server = Server(host="127.0.0.1", port=port, process=process)
    try:
        _wait_until_ready(server, workers=settings.workers, timeout=60)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
