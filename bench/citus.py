"""The hot path on Citus: `bench/run citus`, and the cluster a hot-path run uses (`--citus-workers`).

`bench/run citus` builds Citus and starts a private cluster (devtools.citus: a
coordinator on --port and 2 workers on the next ports, under --cluster-dir),
runs `bench/run hot-path` on plain PostgreSQL (--postgres-url) and then on the
coordinator, the same arguments to both, and writes one comparison table
(bench/citus_results.py) to bench/results/citus.md and .json. Each hot-path run
is its own process: Django is set up once per process, on one database.

In a hot-path run with --citus-workers the database is created on every node
(devtools.citus) and turned into the distributed layout with distribute_tables.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.citus_results import LAYOUTS, citus_markdown, comparison_table
from bench.database import DatabaseServer
from bench.report import as_markdown, results_files_write
from devtools import PROJECT_DIR
from devtools.citus import citus_cluster, citus_database_create


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


WORKERS = 2
# A batch's INSERT ... SELECT goes through the coordinator, which writes the rows to each shard over a
# connection of its own: up to 16 per worker per statement. At 16 clients that passes the cluster script's
# max_connections of 200 on a worker ("sorry, too many clients already").
WORKER_MAX_CONNECTIONS = 400
# Before the caller's arguments, which therefore override them (not the database's URL nor the results' place).
DEFAULTS = (
    "--scenarios", "1-new,1000-new,subject-1", "--targets", "baseline,service",
    "--seeded", "200000", "--duration", "10", "--warmup", "2", "--repeat", "3", "--concurrency", "16",
)  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/run citus",
        description=__doc__.split("\n\n")[1],
        epilog="Other arguments go to both hot-path runs after the defaults: " + " ".join(DEFAULTS),
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://root@127.0.0.1:5432/postgres"),
        help="the plain PostgreSQL server's maintenance database (env BENCH_POSTGRES_URL)",
    )
    parser.add_argument(
        "--cluster-dir",
        type=Path,
        default=Path(os.environ.get("CITUS_BENCH_DIR", "/tmp/citus-bench")),
        help="the cluster's directory (env CITUS_BENCH_DIR)",
    )
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("CITUS_BENCH_PORT", "5800")), help="the coordinator's port"
    )
    parser.add_argument("--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results")
    parser.add_argument("--results-name", default="citus")
    args, hot_path = parser.parse_known_args(argv)
    status = 0
    with (
        tempfile.TemporaryDirectory() as results,
        citus_cluster(args.cluster_dir, args.port, WORKERS, max_connections=WORKER_MAX_CONNECTIONS) as coordinator,
    ):
        layouts = {
            "postgresql": (args.postgres_url, []),
            "citus": (f"{coordinator}/postgres", ["--citus-workers", str(WORKERS)]),
        }
        for layout in LAYOUTS:
            url, extra = layouts[layout]
            print(f"== {layout} ({url})", flush=True)
            command = [sys.executable, "-m", "bench", "hot-path", *DEFAULTS, *hot_path, "--postgres-url", url, *extra]
            command += ["--results-dir", results, "--results-name", layout]
            status = subprocess.run(command, cwd=PROJECT_DIR, check=False).returncode or status
        data = {layout: json.loads((Path(results) / f"{layout}.json").read_text()) for layout in LAYOUTS}
    markdown = citus_markdown(data, " ".join(["bench/run", "citus", *argv]))
    json_path, markdown_path = results_files_write(
        directory=args.results_dir, name=args.results_name, data=data, markdown=markdown
    )
    print(as_markdown(comparison_table(data)))
    print(f"\nwrote {json_path} and {markdown_path}")
    return status
