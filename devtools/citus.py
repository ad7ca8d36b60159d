"""A local Citus cluster (a coordinator and workers on consecutive ports), and a database on all its nodes.

The cluster itself is made by the `build` and `cluster` scripts of the Citus
tools directory (CITUS_TOOLS, beside the repository by default): `build`
installs Citus into the machine's PostgreSQL 15, `cluster start DIR PORT N` runs
a coordinator on PORT and N workers on the next ports. scripts/test-citus and
`bench/run citus` use them through here.

    python -m devtools.citus postgres://root@127.0.0.1:5700 NAME WORKERS

creates database NAME (dropped first if it exists) with the citus extension on
every node and the workers added to the coordinator. citus_bare_node() is a server as a
new worker is before `manage.py add_worker` prepares it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from devtools import PROJECT_DIR
from devtools.cluster import Cluster, private_cluster

# The server `build` installs Citus into, and the one the `cluster` script runs.
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


def citus_tools() -> Path:
    return Path(os.environ.get("CITUS_TOOLS") or PROJECT_DIR.parent / "shared" / "citus")


def citus_database_create(server_url: str, name: str, workers: int) -> None:
    """Drop and create database `name` on the coordinator at server_url (no database in it) and its workers,
    each with the citus extension, the workers added as nodes."""
    parts = urlsplit(server_url)
    host, port = parts.hostname, parts.port or 5432
    ports = [port + i for i in range(workers + 1)]
    database = sql.Identifier(name)
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as coordinator:
        # Citus propagates CREATE and DROP DATABASE to the workers when asked to.
        coordinator.execute("SET citus.enable_create_database_propagation = on")
        coordinator.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))
        coordinator.execute(sql.SQL("CREATE DATABASE {}").format(database))
    for node_port in reversed(ports):
        with psycopg.connect(f"postgres://{parts.username}@{host}:{node_port}/{name}", autocommit=True) as node:
            node.execute("CREATE EXTENSION IF NOT EXISTS citus")
    with psycopg.connect(f"{server_url}/{name}", autocommit=True) as coordinator:
        coordinator.execute("SELECT citus_set_coordinator_host(%s, %s)", [host, port])
        for node_port in ports[1:]:
            coordinator.execute("SELECT citus_add_node(%s, %s)", [host, node_port])


def _cluster(*args: str) -> None:
    subprocess.run([str(citus_tools() / "cluster"), *args], check=True, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def citus_cluster(directory: Path, port: int, workers: int, *, max_connections: int | None = None) -> Iterator[str]:
    """A started cluster under directory (Citus built first, idempotent), its coordinator's server URL
    yielded (postgres://root@127.0.0.1:PORT, no database); stopped at the end.

    max_connections, if given, is set on each worker (ALTER SYSTEM, then a restart): the coordinator opens
    a connection per shard for some statements, more than the cluster script's default allows under load.
    """
    subprocess.run(["bash", str(citus_tools() / "build")], check=True)
    # A cluster left running by an interrupted run is restarted: `cluster start` expects it stopped.
    _cluster("stop", str(directory))
    _cluster("start", str(directory), str(port), str(workers))
    try:
        if max_connections is not None:
            for node_port in range(port + 1, port + workers + 1):
                with psycopg.connect(f"postgres://root@127.0.0.1:{node_port}/postgres", autocommit=True) as node:
                    node.execute(sql.SQL("ALTER SYSTEM SET max_connections = {}").format(sql.Literal(max_connections)))
            _cluster("stop", str(directory))
            _cluster("start", str(directory), str(port), str(workers))
        yield f"postgres://root@127.0.0.1:{port}"
    finally:
        _cluster("stop", str(directory))


@contextlib.contextmanager
def citus_bare_node() -> Iterator[Cluster]:
    """A started PostgreSQL 15 server on a free port that loads Citus and holds nothing else (no citus
    extension, no database but the defaults), as a new worker is before it is added; Citus built first
    (idempotent). Stopped and deleted at the end."""
    subprocess.run(["bash", str(citus_tools() / "build")], check=True)
    with private_cluster(
        prefix="citus-node-", bin_dir=POSTGRES_BIN, settings={"shared_preload_libraries": "citus"}
    ) as node:
        yield node


if __name__ == "__main__":
    citus_database_create(sys.argv[1], sys.argv[2], int(sys.argv[3]))
