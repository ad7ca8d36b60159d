"""assignments/citus/worker_nodes.py: add_worker (docs/how-to/scale-out-citus.md): a new worker node prepared, added and
rebalanced onto.

On Citus (scripts/test-citus) these start a throwaway cluster of their own on free ports, a coordinator and
one worker with the service's database migrated and distributed, and a bare server for the new worker, so
that adding a node and moving shards leaves the suite's cluster as it is. On PostgreSQL and SQLite only the
refusal and the choice of transfer mode run.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.core.management import CommandError, call_command
from psycopg import sql

from assignments.citus.worker_nodes import transfer_mode
from devtools.citus import citus_bare_node, citus_cluster, citus_database_create
from devtools.cluster import Cluster, private_cluster
from devtools.ports import free_port, free_port_range
from tests.helpers.database import on_citus
from tests.helpers.processes import manage_output, manage_run

citus = pytest.mark.skipif(not on_citus, reason="starts a Citus cluster of its own (scripts/test-citus)")

DATABASE = "add_worker"


@dataclass(frozen=True)
class Throwaway:
    server: str
    worker_port: int
    new_node: Cluster

    def env(self, *, port: int | None = None, database: str = DATABASE) -> dict[str, str]:
        """manage.py's environment for a database of the cluster, the coordinator's by default."""
        server = self.server if port is None else self.server.rsplit(":", 1)[0] + f":{port}"
        return {"DATABASE_URL": f"{server}/{database}", "SECRET_KEY": "add-worker-tests"}

    def rows(self, query: str) -> list[tuple]:
        """The rows a query returns on the coordinator's database."""
        with psycopg.connect(f"{self.server}/{DATABASE}") as coordinator:
            return coordinator.execute(query).fetchall()

    def nodes(self) -> list[tuple[str, int, bool]]:
        return self.rows("SELECT nodename, nodeport, isactive FROM pg_dist_node ORDER BY 2")

    def add_worker(self, port: int, *args: str) -> subprocess.CompletedProcess:
        return manage_run("add_worker", "127.0.0.1", "--port", str(port), *args, env=self.env())


@pytest.fixture(scope="module")
def cluster() -> Iterator[Throwaway]:
    port = free_port_range(2)
    # Not pytest's tmp_path: the cluster's servers run as another user, who may not enter that.
    directory = Path(tempfile.mkdtemp(prefix="add-worker-citus-"))
    try:
        with citus_cluster(directory, port, 1) as server, citus_bare_node() as new_node:
            citus_database_create(server, DATABASE, 1)
            with psycopg.connect(f"{server}/{DATABASE}", autocommit=True) as coordinator:
                # 4 shards a table instead of 32: distributing and rebalancing take seconds, not minutes.
                coordinator.execute(
                    sql.SQL("ALTER DATABASE {} SET citus.shard_count = 4").format(sql.Identifier(DATABASE))
                )
            throwaway = Throwaway(server, port + 1, new_node)
            manage_output("migrate", "--no-input", env=throwaway.env())
            manage_output("distribute_tables", env=throwaway.env())
            yield throwaway
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def first_run(cluster) -> subprocess.CompletedProcess:
    done = cluster.add_worker(cluster.new_node.port)
    assert done.returncode == 0, done.stderr
    return done


@citus
def test_add_worker__new_node__database_and_extension_made_there_and_node_added(cluster, first_run):
    node = f"127.0.0.1:{cluster.new_node.port}"
    assert first_run.stdout.splitlines() == [
        f"node {node}: database {DATABASE} created",
        f"node {node}: citus extension created",
        f"node {node}: added to the cluster",
        "done",
    ]
    with psycopg.connect(cluster.new_node.url(DATABASE)) as new:
        assert new.execute("SELECT extname FROM pg_extension WHERE extname = 'citus'").fetchone() == ("citus",)
    assert ("127.0.0.1", cluster.new_node.port, True) in cluster.nodes()


@citus
def test_add_worker__run_again__changes_nothing_and_says_so(cluster, first_run):
    nodes = cluster.nodes()

    again = cluster.add_worker(cluster.new_node.port)

    node = f"127.0.0.1:{cluster.new_node.port}"
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"node {node}: database {DATABASE} already there",
        f"node {node}: citus extension already there",
        f"node {node}: already in the cluster",
        "the node was already prepared and in the cluster; nothing to do",
    ]
    assert cluster.nodes() == nodes


@citus
def test_add_worker__rebalance__shards_moved_onto_the_new_node_writes_blocked_meanwhile(cluster, first_run):
    moved = cluster.add_worker(cluster.new_node.port, "--rebalance")

    assert moved.returncode == 0, moved.stderr
    lines = moved.stdout.splitlines()
    # The cluster script's servers keep PostgreSQL's default wal_level.
    assert lines[3].startswith(
        "shard transfer mode block_writes: wal_level is not logical on the coordinator (replica), "
    )
    assert lines[4] == "shards moved"
    shards = cluster.rows(
        "SELECT nodeport, count(*) FROM citus_shards WHERE citus_table_type = 'distributed' GROUP BY 1"
    )
    per_node = cluster.rows("SELECT nodename, nodeport, count(*) FROM citus_shards GROUP BY 1, 2 ORDER BY 1, 2")
    # 4 shards of each of 4 co-located tables, 2 shard groups on each worker.
    assert dict(shards) == {cluster.worker_port: 8, cluster.new_node.port: 8}
    assert lines[5:-1] == [f"node {host}:{port}: {count} shards" for host, port, count in per_node]
    assert lines[-1] == "done"

    again = cluster.add_worker(cluster.new_node.port, "--rebalance")

    assert again.returncode == 0, again.stderr
    assert "the shards were already balanced; none moved" in again.stdout.splitlines()
    assert again.stdout.splitlines()[-1] == "the node was already prepared and in the cluster; nothing to do"


@citus
def test_add_worker__node_not_listening__refused_nothing_changed(cluster):
    nodes = cluster.nodes()
    port = free_port()

    done = cluster.add_worker(port)

    assert done.returncode == 1
    assert done.stderr.startswith(
        f"CommandError: nothing changed: cannot connect to database postgres on node 127.0.0.1:{port}: "
    )
    assert len(done.stderr.splitlines()) == 1
    assert cluster.nodes() == nodes


@citus
def test_add_worker__node_without_citus_loaded__refused_nothing_changed(cluster):
    nodes = cluster.nodes()
    with private_cluster(prefix="add-worker-plain-") as plain:
        done = cluster.add_worker(plain.port)

        with psycopg.connect(plain.url("postgres")) as server:
            databases = [name for (name,) in server.execute("SELECT datname FROM pg_database")]

    assert done.returncode == 1
    assert done.stderr == (
        f"CommandError: nothing changed: node 127.0.0.1:{plain.port}: citus is not in its "
        "shared_preload_libraries (empty): add it there and restart the node\n"
    )
    assert DATABASE not in databases
    assert cluster.nodes() == nodes


@citus
@pytest.mark.parametrize(
    ("node", "database", "reason"),
    [
        ("coordinator", "postgres", "the tables are not distributed: run distribute_tables first"),
        ("worker", DATABASE, "this database is a Citus worker: run add_worker on the coordinator"),
    ],
)
def test_add_worker__not_a_coordinator_with_the_distributed_layout__refused(cluster, node, database, reason):
    nodes = cluster.nodes()
    port = cluster.worker_port if node == "worker" else None

    done = manage_run(
        "add_worker", "127.0.0.1", "--port", str(free_port()), env=cluster.env(port=port, database=database)
    )

    assert done.returncode == 1
    assert done.stderr.startswith(f"CommandError: nothing changed: {reason}")
    assert cluster.nodes() == nodes


@pytest.mark.skipif(on_citus, reason="this database is Citus")
@pytest.mark.django_db
def test_add_worker__not_citus__refuses_and_changes_nothing():
    with pytest.raises(CommandError, match=r"nothing changed: .* has no citus extension: add_worker runs on"):
        call_command("add_worker", "127.0.0.1", "--port", str(free_port()))


@pytest.mark.parametrize(
    ("wal_levels", "mode"),
    [
        ({"the coordinator": "logical", "10.0.0.11:5432": "logical", "10.0.0.13:5432": "logical"}, "auto"),
        ({"the coordinator": "logical", "10.0.0.11:5432": "replica", "10.0.0.13:5432": "logical"}, "block_writes"),
        ({"the coordinator": "logical", "10.0.0.11:5432": "unknown"}, "block_writes"),
    ],
)
def test_transfer_mode__online_only_when_every_node_runs_wal_level_logical(wal_levels, mode):
    chosen, reason = transfer_mode(wal_levels)

    assert chosen == mode
    assert ("10.0.0.11:5432" in reason) == (mode == "block_writes")
