"""The real service in a subprocess for end-to-end tests: gunicorn as deployed, and scripts/run-demo."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from devtools.gunicorn import gunicorn as devtools_gunicorn
from devtools.ports import free_port, wait_for_port
from devtools.processes import process_stop
from tests.helpers import PROJECT_DIR


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections (in the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


# The tests read the access log (off by default, when the proxy logs requests).
E2E_ENV = {"GUNICORN_ACCESS_LOG": "true"}
# Set for the session by tests/e2e/conftest.py: a directory under pytest's basetemp.
LOG_DIR: Path | None = None


def gunicorn_log(base_url: str) -> Path:
    """The log of the server at base_url started by gunicorn() below."""
    assert LOG_DIR is not None, "gunicorn() runs under tests/e2e, whose conftest sets LOG_DIR"
    return LOG_DIR / f"gunicorn-{base_url.rsplit(':', 1)[1]}.log"


@contextlib.contextmanager
def gunicorn(*, env: dict[str, str], workers: int = 2) -> Iterator[tuple[str, subprocess.Popen]]:
    """The service as deployed (devtools.gunicorn: deploy/gunicorn.conf.py) with env added to ours and the
    access log on; yields (base URL, process).

    A failing test's server log: its path is printed on stderr as the server starts, which pytest shows
    under the failure's "Captured stderr"; it lies in pytest's basetemp, of which the last three runs' are
    kept (/tmp/pytest-of-<user>/pytest-current/gunicorn0/gunicorn-<port>.log), never in the checkout.
    """
    port = free_port()
    log_path = gunicorn_log(f"http://127.0.0.1:{port}")
    print(f"gunicorn log: {log_path}", file=sys.stderr)
    with devtools_gunicorn(
        env={**os.environ, **E2E_ENV, **env}, log_path=log_path, port=port, options=("--workers", str(workers))
    ) as server:
        yield server.url, server.process


def worker_pids(master: int) -> set[int]:
    """gunicorn's workers: the master's children, from /proc."""
    children = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # The command name in parentheses may hold spaces; the parent's PID is the second field after it.
            if int(stat.rpartition(")")[2].split()[1]) == master:
                children.add(int(entry.name))
    return children


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


def tool_missing(reason: str) -> NoReturn:
    """A program an end-to-end test needs beside the service (nginx, node) is missing: a failure in CI
    (REQUIRE_POSTGRES=1, as .ci/run sets it), where everything must run; a skip elsewhere."""
    if os.environ.get("REQUIRE_POSTGRES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)
