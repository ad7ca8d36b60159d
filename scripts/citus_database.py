"""Create an empty database with Citus on a local cluster's coordinator and workers: citus_database.py URL NAME WORKERS.

The cluster's nodes listen on consecutive ports, the coordinator first (the
`cluster` script's layout). An existing database of that name is dropped first.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import psycopg


def main(server_url: str, name: str, workers: int) -> None:
    parts = urlsplit(server_url)
    host, port = parts.hostname, parts.port
    ports = [port + i for i in range(workers + 1)]
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as coordinator:
        # Citus propagates CREATE and DROP DATABASE to the workers when asked to.
        coordinator.execute("SET citus.enable_create_database_propagation = on")
        coordinator.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        coordinator.execute(f'CREATE DATABASE "{name}"')
    for node_port in reversed(ports):
        with psycopg.connect(f"postgres://{parts.username}@{host}:{node_port}/{name}", autocommit=True) as node:
            node.execute("CREATE EXTENSION IF NOT EXISTS citus")
    with psycopg.connect(f"{server_url}/{name}", autocommit=True) as coordinator:
        coordinator.execute("SELECT citus_set_coordinator_host(%s, %s)", [host, port])
        for node_port in ports[1:]:
            coordinator.execute("SELECT citus_add_node(%s, %s)", [host, node_port])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
