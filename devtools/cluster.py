"""A throwaway PostgreSQL cluster that a test or a benchmark may stop and start without disturbing anyone.

initdb into a temporary directory, a free port on 127.0.0.1, trust auth for
`root`, fsync off (its data is thrown away). PostgreSQL refuses to run as root:
when we run as root, the cluster runs as `nobody` (runuser), which then owns the
directory.
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
from psycopg import sql

from devtools.ports import free_port


class ClusterUnavailable(RuntimeError):
    """This machine cannot run a private cluster (no server binaries, or root without runuser): tests skip."""


def postgres_bin_dir() -> Path:
    """The directory holding initdb and pg_ctl: on the PATH, else the newest /usr/lib/postgresql/*/bin."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).parent] if on_path else []
    candidates += [Path(path) for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for path in candidates:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    raise ClusterUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not on the PATH nor in /usr/lib/postgresql")


class Cluster:
    """One throwaway cluster; `url(name)` is a database on it."""

    def __init__(self, bin_dir: Path, base: Path, settings: dict[str, str] | None = None) -> None:
        self.bin_dir = bin_dir
        self.base = base
        self.settings = settings or {}
        self.data = base / "data"
        self.log_path = base / "postgresql.log"
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if not shutil.which("runuser"):
                raise ClusterUnavailable("running as root without runuser: cannot start PostgreSQL as another user")
            shutil.chown(base, user="nobody")
            self.as_user = ["runuser", "-u", "nobody", "--"]

    def url(self, database: str) -> str:
        return f"postgres://root@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        # cwd: `nobody` may not be allowed into the caller's directory.
        subprocess.run([*self.as_user, *args], cwd=self.base, check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._run(
            str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "root", "--auth=trust", "-E", "UTF8", "--no-sync"
        )

    def start(self) -> None:
        """Start and wait until it accepts connections (pg_ctl -w)."""
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.base} -c fsync=off"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(
            str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-o", options, "-w", "start"
        )

    def stop(self) -> None:
        """Fast shutdown: open sessions are ended at once, as in a crash or a failover, and the wait is for the exit."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def is_running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_database(self, name: str) -> tuple[str, str]:
        """Create database `name`; its URL and the server's version."""
        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            (version,) = connection.execute("SHOW server_version").fetchone()
        return self.url(name), version


@contextlib.contextmanager
def private_cluster(
    *, prefix: str = "private-cluster-", bin_dir: Path | None = None, settings: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """A started cluster in a new temporary directory, stopped and deleted at the end; ClusterUnavailable
    if this machine cannot run one.

    bin_dir: the server's binaries, postgres_bin_dir() by default; settings: server settings given at start.
    """
    bin_dir = bin_dir or postgres_bin_dir()
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        cluster = Cluster(bin_dir, base, settings)
        cluster.init()
        cluster.start()
        try:
            yield cluster
        finally:
            if cluster.is_running():
                with contextlib.suppress(subprocess.SubprocessError):
                    cluster.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
