"""gunicorn serving config.wsgi:application for one benchmark run."""

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

from bench.cpu import children_of

PROJECT_DIR = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    host: str
    port: int
    process: subprocess.Popen

    def worker_pids(self) -> list[int]:
        return children_of(self.process.pid)


def _wait_until_answering(server: Server, *, workers: int, timeout: float) -> None:
    """Until every worker has booted and a request that touches no database gets its answer (404)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.process.returncode}")
        if len(server.worker_pids()) >= workers:
            connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
            try:
                connection.request("GET", "/bench-ready-probe")
                if connection.getresponse().status == 404:
                    return
            except OSError:
                pass
            finally:
                connection.close()
        time.sleep(0.1)
    raise TimeoutError(f"gunicorn did not answer within {timeout}s")


@contextlib.contextmanager
def gunicorn(*, env: dict[str, str], workers: int, threads: int, log_path: Path) -> Iterator[Server]:
    """gunicorn with `workers` processes: sync ones, or gthread ones when threads > 1 (which keep
    client connections alive, as deploy/gunicorn.conf.py's do)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "gthread" if threads > 1 else "sync",
        "--threads",
        str(threads),
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=log, stderr=log)
    server = Server(host="127.0.0.1", port=port, process=process)
    try:
        _wait_until_answering(server, workers=workers, timeout=30)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
