"""Start the real service (gunicorn) in a subprocess for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections (in the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def process_stop(process: subprocess.Popen, *, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process has not ended within timeout seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# The tests read the access log (off by default, when the proxy logs requests).
E2E_ENV = {"GUNICORN_ACCESS_LOG": "true"}


@contextlib.contextmanager
def gunicorn(*, env: dict[str, str], workers: int = 2) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run `gunicorn config.wsgi:application` with the deployment's own settings file
    (deploy/gunicorn.conf.py) and env added to ours; yields (base URL, process).

    The process's output goes to a log file under var/ so a failing test can show it.
    """
    port = free_port()
    log_path = PROJECT_DIR / "var" / f"gunicorn-e2e-{port}.log"
    log_path.parent.mkdir(exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        "--config",
        "deploy/gunicorn.conf.py",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, cwd=PROJECT_DIR, env={**os.environ, **E2E_ENV, **env}, stdout=log, stderr=log
        )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}", process
    finally:
        process_stop(process)
        if process.returncode not in (0, -15):
            sys.stderr.write(log_path.read_text())


def database_url_for_tests() -> str:
    """A DATABASE_URL naming the database the running test session uses (its test database)."""
    from django.db import connection

    settings_dict = connection.settings_dict
    if connection.vendor != "postgresql":
        raise RuntimeError("end-to-end tests run against PostgreSQL")
    user = settings_dict["USER"] or ""
    password = f":{settings_dict['PASSWORD']}" if settings_dict["PASSWORD"] else ""
    auth = f"{user}{password}@" if user else ""
    host = settings_dict["HOST"] or "127.0.0.1"
    port = settings_dict["PORT"] or "5432"
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


def wait_until(predicate, *, timeout: float, interval: float = 0.1):
    """Poll predicate until it returns something truthy; returns that value or raises TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(interval)


def demo_env(database: Path, port: int) -> dict[str, str]:
    """The environment of scripts/run-demo on a SQLite file of its own (never the checkout's var/db.sqlite3),
    serving on `port`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DATABASE_", "GUNICORN_"))}
    return {**env, "DATABASE_URL": f"sqlite:///{database}", "GUNICORN_BIND": f"127.0.0.1:{port}"}


@contextlib.contextmanager
def demo_server(database: Path) -> Iterator[tuple[str, str, list[str]]]:
    """scripts/run-demo serving on a free port: (address, the token of its `export TOKEN=` line, the lines it
    printed before serving)."""
    port = free_port()
    process = subprocess.Popen(
        ["scripts/run-demo"], cwd=PROJECT_DIR, env=demo_env(database, port), stdout=subprocess.PIPE, text=True
    )
    try:
        lines: list[str] = []
        while not any(line.startswith("API description:") for line in lines):
            line = process.stdout.readline()
            assert line, "run-demo ended before serving:\n" + "\n".join(lines)
            lines.append(line.strip())
        exports = [line.removeprefix("export TOKEN=") for line in lines if line.startswith("export TOKEN=")]
        assert len(exports) == 1, lines
        wait_for_port(port)
        yield f"127.0.0.1:{port}", exports[0], lines
    finally:
        process_stop(process)
