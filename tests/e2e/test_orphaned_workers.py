"""A worker whose master is gone stops, as gunicorn's own workers do (deploy/workers.py,
ServiceWorker.callback_notify): it keeps neither the listening socket nor its database connections."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.helpers.server import gunicorn, wait_until, worker_pids

pytestmark = pytest.mark.e2e


def ended(pid: int) -> bool:
    """Exited: no such process, or one left for a parent to reap (a zombie, state Z)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def both_forked(master: int) -> set[int] | None:
    workers = worker_pids(master)
    return workers if len(workers) == 2 else None


def address_free(port: int) -> bool:
    """Whether a new master could bind the port: with SO_REUSEADDR, as gunicorn binds it, where devtools.ports
    asks whether a port is unused at all."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_master_killed__its_workers_stop_and_free_the_address(tmp_path):
    # Given: a server whose workers beat every second (the heartbeat is half GUNICORN_TIMEOUT; the database is a
    # SQLite file: no path here reads it)
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "SECRET_KEY": "e2e-orphans-not-secret",
        "GUNICORN_TIMEOUT": "2",
    }
    with gunicorn(env=env, workers=2) as (base_url, master):
        wait_until(lambda: httpx.get(f"{base_url}/no-such-path").status_code == 404, timeout=15)
        # Both forked: the first may answer before the second is.
        workers = wait_until(lambda: both_forked(master.pid), timeout=15)

        # When: the master is killed, with no chance to stop its workers
        master.kill()
        master.wait()

        # Then: every worker stops on its own, and the address can be bound again
        wait_until(lambda: all(ended(pid) for pid in workers), timeout=20)
        assert address_free(int(base_url.rsplit(":", 1)[1]))
