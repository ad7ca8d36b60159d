"""Adding a worker node to the service's Citus cluster (docs/how-to/scale-out-citus.md): the service's
database and the citus extension made on the node, the node added on the coordinator and, when asked,
the shards rebalanced onto it.

Citus creates neither the database nor the extension on a node added later. They are made here as the
coordinator's user (DATABASE_URL's credentials), connected to the node's `postgres` maintenance database,
then to the new database.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
from django.db import Error as DatabaseError
from django.db import connection
from psycopg import sql

from assignments.citus.table_layout import NotCitus, citus_coordinator_ensure
from assignments.storage_citus import assignments_distributed

# A node that is up answers at once: an address that drops packets is given up after this.
NODE_CONNECT_TIMEOUT_S = 10
# Every statement but the wait for the rebalancer is catalog work of a second or less; one that takes
# longer waits for a lock (a rebalance or a migration under way) and is better stopped, with its message.
STATEMENT_TIMEOUT = "60s"

SHARDS_PER_NODE = "SELECT nodename, nodeport, count(*) FROM citus_shards GROUP BY 1, 2 ORDER BY 1, 2"


class NodeUnusable(Exception):
    """The new node cannot be reached or cannot run Citus: nothing was changed."""


class StepFailed(Exception):
    """A step failed; the steps reported before it were done, and running again takes up from there."""


@dataclass(frozen=True)
class Node:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def worker_add(node: Node, *, rebalance: bool, say: Callable[[str], None]) -> bool:
    """Prepare `node`, add it to the cluster and, with `rebalance`, move shards onto it, saying each step as it
    is done; whether anything changed.

    Idempotent. Raises NotCitus or NodeUnusable having changed nothing, StepFailed once some steps are done.
    """
    citus_coordinator_ensure("add_worker")
    if not assignments_distributed():
        raise NotCitus("the tables are not distributed: run distribute_tables first (docs/how-to/scale-out-citus.md)")
    name = connection.settings_dict["NAME"]
    with _coordinator_statements_bounded():
        with _node_connect(node, "postgres", failure=NodeUnusable) as maintenance:
            _citus_loadable_ensure(node, maintenance)
            with _step(f"node {node}: creating database {name}"):
                changes = [_database_create(node, maintenance, name, say)]
        with (
            _node_connect(node, name, failure=StepFailed) as database,
            _step(f"node {node}: creating the citus extension"),
        ):
            changes.append(_extension_create(node, database, say))
        with _step(f"node {node}: adding it to the cluster"):
            changes.append(_node_add(node, say))
        if rebalance:
            with _step("rebalancing"):
                changes.append(_rebalance(say))
    return any(changes)


def _one_line(exc: Exception) -> str:
    # PostgreSQL's messages carry a detail or a hint on lines of their own.
    return " ".join(str(exc).split())


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    try:
        yield
    except (psycopg.Error, DatabaseError) as exc:
        raise StepFailed(f"{what} failed: {_one_line(exc)}") from None


@contextlib.contextmanager
def _coordinator_statements_bounded() -> Iterator[None]:
    # Management commands run without the web server's bounds (config/settings.py): this one sets its own.
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, false)", [STATEMENT_TIMEOUT])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")


def _node_connect(node: Node, database: str, *, failure: type[Exception]) -> psycopg.Connection:
    settings_dict = connection.settings_dict
    try:
        return psycopg.connect(
            host=node.host,
            port=node.port,
            dbname=database,
            user=settings_dict["USER"] or None,
            password=settings_dict["PASSWORD"] or None,
            connect_timeout=NODE_CONNECT_TIMEOUT_S,
            options=f"-c statement_timeout={STATEMENT_TIMEOUT}",
            # CREATE DATABASE refuses to run in a transaction.
            autocommit=True,
        )
    except psycopg.OperationalError as exc:
        raise failure(f"cannot connect to database {database} on node {node}: {_one_line(exc)}") from None


def _citus_loadable_ensure(node: Node, maintenance: psycopg.Connection) -> None:
    try:
        (available,) = maintenance.execute(
            "SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'citus')"
        ).fetchone()
        (libraries,) = maintenance.execute("SHOW shared_preload_libraries").fetchone()
    except psycopg.Error as exc:
        raise NodeUnusable(f"node {node}: {_one_line(exc)}") from None
    if not available:
        raise NodeUnusable(f"node {node}: the citus extension is not installed there")
    if "citus" not in (library.strip().strip('"') for library in libraries.split(",")):
        raise NodeUnusable(
            f"node {node}: citus is not in its shared_preload_libraries ({libraries or 'empty'}): "
            "add it there and restart the node"
        )


def _database_create(node: Node, maintenance: psycopg.Connection, name: str, say: Callable[[str], None]) -> bool:
    (exists,) = maintenance.execute("SELECT EXISTS (SELECT FROM pg_database WHERE datname = %s)", [name]).fetchone()
    if not exists:
        maintenance.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    say(f"node {node}: database {name} {'already there' if exists else 'created'}")
    return not exists


def _extension_create(node: Node, database: psycopg.Connection, say: Callable[[str], None]) -> bool:
    (exists,) = database.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')").fetchone()
    if not exists:
        database.execute("CREATE EXTENSION IF NOT EXISTS citus")
    say(f"node {node}: citus extension {'already there' if exists else 'created'}")
    return not exists


def _node_add(node: Node, say: Callable[[str], None]) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_dist_node WHERE nodename = %s AND nodeport = %s)", [node.host, node.port]
        )
        (known,) = cursor.fetchone()
        if not known:
            cursor.execute("SELECT citus_add_node(%s, %s)", [node.host, node.port])
    say(f"node {node}: {'already in the cluster' if known else 'added to the cluster'}")
    return not known


def _rebalance(say: Callable[[str], None]) -> bool:
    mode, reason = transfer_mode(_wal_levels())
    say(f"shard transfer mode {mode}: {reason}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT citus_rebalance_start(shard_transfer_mode => %s::citus.shard_transfer_mode)", [mode])
        (job,) = cursor.fetchone()
        if job is not None:
            # Moving shards takes as long as copying them. Interrupted, the wait ends but the moves go on
            # in the background (citus_rebalance_status()).
            cursor.execute("SET statement_timeout = 0")
            cursor.execute("SELECT citus_rebalance_wait()")
        cursor.execute(SHARDS_PER_NODE)
        shards = cursor.fetchall()
    say("shards moved" if job is not None else "the shards were already balanced; none moved")
    for host, port, count in shards:
        say(f"node {host}:{port}: {count} shards")
    return job is not None


def _wal_levels() -> dict[str, str]:
    """Each node's wal_level, by name; "unknown" for a worker that did not answer."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW wal_level")
        levels = {"the coordinator": cursor.fetchone()[0]}
        cursor.execute("SELECT nodename, nodeport, success, result FROM run_command_on_workers('SHOW wal_level')")
        levels.update((f"{host}:{port}", level if ok else "unknown") for host, port, ok, level in cursor.fetchall())
    return levels


def transfer_mode(wal_levels: dict[str, str]) -> tuple[str, str]:
    """The rebalancer's shard_transfer_mode for nodes with these wal_levels, and why.

    Citus moves a shard online, by logical replication, only between nodes that all run wal_level = logical
    ('auto'); elsewhere 'auto' fails, and 'block_writes' copies the shard while writes to it wait.
    """
    others = [f"{node} ({level})" for node, level in wal_levels.items() if level != "logical"]
    if others:
        return "block_writes", (
            f"wal_level is not logical on {', '.join(others)}; writes to a moving shard wait, reads go on"
        )
    return "auto", "every node runs wal_level = logical; shards move online, by logical replication"
