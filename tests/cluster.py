"""A throwaway PostgreSQL cluster that end-to-end tests may stop and start without disturbing anyone.

initdb into a temporary directory, a free port on 127.0.0.1, trust auth for
`root`. PostgreSQL refuses to run as root; when the tests run as root, the
cluster runs as `nobody`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.server import free_port


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


@contextlib.contextmanager
def private_cluster() -> Iterator[Cluster]:
    """A started cluster with an empty database `service` (Cluster.url); stopped and removed afterwards.
    Skips the test when the PostgreSQL server binaries are not installed."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found")
    base = Path(tempfile.mkdtemp(prefix="e2e-cluster-"))
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
