"""bench/run on a local Citus cluster (--citus-workers): the bench database on every node, and its nodes.

The cluster is laid out as ../shared/citus/cluster makes it: the coordinator at
--postgres-url, each worker on the next port. The database is created the way
scripts/test-citus creates the tests' (scripts/citus_database.py); bench/run
then turns it into the distributed layout with distribute_tables.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from bench.database import DatabaseServer
from scripts.citus_database import main as citus_database_create


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username}@{parts.hostname}:{port}" if parts.username else f"{parts.hostname}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


class CitusCluster:
    """The coordinator's DatabaseServer and one for each worker's maintenance database."""

    def __init__(self, coordinator: DatabaseServer, workers: int) -> None:
        self.coordinator = coordinator
        # "Citus 13.2.2 on x86_64-pc-linux-gnu, compiled by ..."
        (version,) = coordinator.connection.execute("SELECT citus_version()").fetchone()
        self.version = version.split()[1]
        # Without it the coordinator's DROP DATABASE at the end would leave the database on the workers.
        coordinator.connection.execute("SET citus.enable_create_database_propagation = on")
        port = urlsplit(coordinator.admin_url).port or 5432
        self.workers = [DatabaseServer(_with_port(coordinator.admin_url, port + i)) for i in range(1, workers + 1)]

    def recreate(self, name: str) -> str:
        """Drop and create database `name` with the citus extension on every node, the workers added; its URL."""
        parts = urlsplit(self.coordinator.admin_url)
        citus_database_create(urlunsplit((parts.scheme, parts.netloc, "", "", "")), name, len(self.workers))
        return self.coordinator.url(name)

    def layout(self) -> str:
        """What the results name the layout, with each node's max_connections: the coordinator opens a
        connection per shard for some statements, so the workers' limit can decide whether a run fails."""
        limits = [
            node.connection.execute("SHOW max_connections").fetchone()[0] for node in (self.coordinator, *self.workers)
        ]
        return (
            f"Citus {self.version}: a coordinator and {len(self.workers)} workers (distribute_tables); "
            f"max_connections {limits[0]} on the coordinator, {', '.join(limits[1:])} on the workers"
        )

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
