"""A database outage seen from outside: real gunicorn, its own PostgreSQL cluster stopped and started.

The cluster is private to this module (initdb into a temporary directory, a
free port), so stopping it disturbs nobody else's tests. PostgreSQL refuses to
run as root; when the tests run as root, the cluster runs as `nobody`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from config.healthz import PROBE_REUSE_SECONDS
from tests.conftest import DEMO_YAML
from tests.server import PROJECT_DIR, free_port, gunicorn, wait_until
from tokens.crypto import token_generate

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

SECRET_KEY = "e2e-database-outage-not-secret"
PROBLEM_CONTENT_TYPE = "application/problem+json"


def postgres_bin_dir() -> Path | None:
    candidates = [Path(shutil.which("pg_ctl")).parent] if shutil.which("pg_ctl") else []
    candidates += [Path(path) for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    return next((path for path in candidates if (path / "initdb").exists() and (path / "pg_ctl").exists()), None)


class Cluster:
    """A throwaway PostgreSQL cluster, trust auth for `root`, on 127.0.0.1:<port>."""

    def __init__(self, bin_dir: Path, base: Path) -> None:
        self.bin_dir = bin_dir
        self.base = base
        self.data = base / "data"
        self.port = free_port()
        self.url = f"postgres://root@127.0.0.1:{self.port}/service"
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if not shutil.which("runuser"):
                pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
            shutil.chown(base, user="nobody")
            self.as_user = ["runuser", "-u", "nobody", "--"]

    def run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self.run(
            str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "root", "--auth=trust", "-E", "UTF8", "--no-sync"
        )

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.base} -c fsync=off"
        self.run(
            str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.base / "log"), "-o", options, "-w",
            "start",
        )  # fmt: skip

    def stop(self) -> None:
        self.run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def is_running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


def manage(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found")
    base = Path(tempfile.mkdtemp(prefix="e2e-outage-"))
    cluster = Cluster(bin_dir, base)
    try:
        cluster.init()
        cluster.start()
        with psycopg.connect(f"postgres://root@127.0.0.1:{cluster.port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE service")
        yield cluster
    finally:
        if cluster.is_running():
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def service_env(cluster, tmp_path_factory) -> dict[str, str]:
    """The environment of a migrated, configured service on the cluster."""
    env = {"DATABASE_URL": cluster.url, "SECRET_KEY": SECRET_KEY}
    manage("migrate", "--no-input", env=env)
    config = tmp_path_factory.mktemp("config") / "config.yaml"
    config.write_text(DEMO_YAML)
    manage("apply_resources", str(config), env=env)
    return env


@pytest.fixture(scope="module")
def proxy_token(service_env) -> str:
    output = manage(
        "shell",
        "-c",
        "from tokens.services import api_token_create; print(api_token_create(name='e2e-outage', role='proxy')[1])",
        env=service_env,
    )
    return output.strip().splitlines()[-1]


def timed(call):
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def assert_database_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == PROBLEM_CONTENT_TYPE
    assert response.headers["retry-after"].isdigit()
    body = response.json()
    assert body["code"] == "database_unavailable"
    assert body["status"] == 503
    assert "Traceback" not in response.text and "psycopg" not in response.text


def test_database_outage__cluster_stopped_then_started__503_then_recovers_without_restart(
    cluster, service_env, proxy_token
):
    assign_body = {"experiment_id": "checkout-button", "subject_ids": ["u-1", "u-2"]}
    link_body = {
        "identifiers": [{"subject_type": "cookie", "subject_id": "c-1"}, {"subject_type": "user", "subject_id": "u-1"}]
    }
    auth = {"Authorization": f"Bearer {proxy_token}"}

    with (
        gunicorn(env=service_env, workers=2) as (base_url, server),
        httpx.Client(base_url=base_url, timeout=15) as http,
    ):
        # Given: a healthy service that has made assignments, every worker holding a connection
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
        before = http.post("/experiment-assignments", json=assign_body, headers=auth)
        assert before.status_code == 200
        for _ in range(4):
            assert http.post("/experiment-assignments", json=assign_body, headers=auth).json() == before.json()

        # When: the database stops
        cluster.stop()
        stopped_at = time.monotonic()

        # Then: once a worker's last success is older than it trusts one for, the health check
        # probes and says so, without detail, within 3 seconds of the stop
        time.sleep(PROBE_REUSE_SECONDS)
        response = http.get("/healthz")
        assert response.status_code == 503
        assert response.json() == {"status": "unavailable", "database": "unavailable"}
        assert response.headers["cache-control"] == "no-store"
        assert time.monotonic() - stopped_at < 3
        assert http.head("/healthz").status_code == 503

        # And every endpoint answers 503 problem+json, on every worker
        for _ in range(4):
            assert_database_unavailable(http.post("/experiment-assignments", json=assign_body, headers=auth))
            assert_database_unavailable(http.post("/id-link", json=link_body, headers=auth))
            # A plain Django view: the admin loads the session from the database.
            assert_database_unavailable(http.get("/admin/", headers={"Cookie": "sessionid=" + "x" * 32}))

        # When: the database comes back
        cluster.start()

        # Then: the same server recovers by itself, and stored assignments are as they were
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
        for _ in range(4):
            response = http.post("/experiment-assignments", json=assign_body, headers=auth)
            assert response.status_code == 200, response.text
            assert response.json() == before.json()
        assert http.post("/id-link", json=link_body, headers=auth).json() == {"success": True}
        assert server.poll() is None


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections (in the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def test_database_outage__database_accepts_but_never_answers__503_within_3_seconds():
    with silent_server() as port:
        env = {"DATABASE_URL": f"postgres://root@127.0.0.1:{port}/service", "SECRET_KEY": SECRET_KEY}
        with gunicorn(env=env, workers=1) as (base_url, _), httpx.Client(base_url=base_url, timeout=15) as http:
            # A worker is up once a path that needs no database answers.
            wait_until(lambda: http.get("/no-such-path").status_code == 404, timeout=15)

            # When / Then: the check gives up on the hanging database within its budget
            for _ in range(2):
                response, elapsed = timed(lambda: http.get("/healthz"))
                assert response.status_code == 503
                assert response.json() == {"status": "unavailable", "database": "unavailable"}
                assert elapsed < 3

            # And an API request fails with 503 once connect_timeout (3 s) expires, not hang
            response, elapsed = timed(
                lambda: http.post(
                    "/experiment-assignments",
                    json={"experiment_id": "checkout-button", "subject_ids": ["u-1"]},
                    # Well formed, so that authentication has to ask the database about it.
                    headers={"Authorization": f"Bearer {token_generate()[1]}"},
                )
            )
            assert_database_unavailable(response)
            assert elapsed < 6


def test_database_outage__twelve_seconds_under_load__a_few_log_lines_with_counts(cluster, service_env, proxy_token):
    body = {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}
    auth = {"Authorization": f"Bearer {proxy_token}"}
    # Without the access log, which writes a line per request by design: the failures' own lines are counted.
    env = {**service_env, "GUNICORN_ACCESS_LOG": "false"}
    with gunicorn(env=env, workers=2) as (base_url, _):
        log_path = PROJECT_DIR / "var" / f"gunicorn-e2e-{base_url.rsplit(':', 1)[1]}.log"
        with httpx.Client(base_url=base_url, timeout=15) as http:
            wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
            assert http.post("/experiment-assignments", json=body, headers=auth).status_code == 200
        lines_before = len(log_path.read_text().splitlines())

        # Given: clients that keep asking, as product backends do
        stop = threading.Event()
        statuses: list[int] = []

        def keep_asking() -> None:
            with httpx.Client(base_url=base_url, timeout=15) as client:
                while not stop.is_set():
                    statuses.append(client.post("/experiment-assignments", json=body, headers=auth).status_code)
                    client.get("/healthz")

        clients = [threading.Thread(target=keep_asking) for _ in range(4)]
        # When: the database is away for 12 s, longer than the 10 s over which repeats are summarised
        cluster.stop()
        try:
            for client in clients:
                client.start()
            time.sleep(12)
        finally:
            stop.set()
            for client in clients:
                client.join(30)
            cluster.start()
        outage_lines = log_path.read_text().splitlines()[lines_before:]

    # Then: hundreds of failed requests, a few dozen lines at most, and the counts of those held back
    assert statuses.count(503) >= 200
    assert set(statuses) == {503}
    assert len(outage_lines) <= 40, "\n".join(outage_lines)
    assert any("more like this" in line for line in outage_lines), "\n".join(outage_lines)
    assert not any(line.startswith(("Traceback", "  File")) for line in outage_lines)
