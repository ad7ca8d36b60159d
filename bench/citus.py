"""The hot path on Citus: `bench/run citus`, and the cluster a hot-path run uses (`--citus-workers`).

`bench/run citus` builds Citus and starts a private cluster (devtools.citus: a
coordinator on --port and 2 workers on the next ports, under --cluster-dir),
runs `bench/run hot-path` on plain PostgreSQL (--postgres-url) and then on the
coordinator, the same arguments to both, and writes one comparison table to
bench/results/citus.md and .json. Each hot-path run is its own process: Django
is set up once per process, on one database.

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
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.database import DatabaseServer, postgres_url_argument
from bench.report import (
    Table,
    as_markdown,
    machine_text,
    markdown_section,
    medians,
    number,
    results_files_write,
    results_heading,
    runs_table,
    throughput,
    unit,
    yes,
)
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
# Load from wrk: the Python load processes' own CPU, taken from the same two cores on both layouts, narrowed
# the gap between them (one new subject: 0.64 under them, 0.45 under wrk; bench/results/history.md).
DEFAULTS = (
    "--scenarios", "1-new,1000-new,subject-1", "--load", "wrk", "--targets", "minimal,service",
    "--seeded", "200000", "--duration", "10", "--warmup", "2", "--repeat", "3", "--concurrency", "16",
)  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/run citus",
        description=__doc__.split("\n\n")[1],
        epilog="Other arguments go to both hot-path runs after the defaults: " + " ".join(DEFAULTS),
    )
    postgres_url_argument(parser, "the plain PostgreSQL server's maintenance database (env BENCH_POSTGRES_URL)")
    parser.add_argument(
        "--cluster-dir",
        type=Path,
        default=Path(os.environ.get("CITUS_BENCH_DIR", "/tmp/citus-bench")),
        help="the cluster's directory (env CITUS_BENCH_DIR)",
    )
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("CITUS_BENCH_PORT", "5800")), help="the coordinator's port"
    )
    parser.add_argument(
        "--shard-count", type=int, help="shards per distributed table on the cluster (default: Citus's, 32)"
    )
    parser.add_argument("--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results")
    parser.add_argument("--results-name", default="citus")
    args, hot_path = parser.parse_known_args(argv)
    status = 0
    shards = [] if args.shard_count is None else ["--shard-count", str(args.shard_count)]
    with (
        tempfile.TemporaryDirectory() as results,
        citus_cluster(args.cluster_dir, args.port, WORKERS, max_connections=WORKER_MAX_CONNECTIONS) as coordinator,
    ):
        layouts = {
            "postgresql": (args.postgres_url, []),
            "citus": (f"{coordinator}/postgres", ["--citus-workers", str(WORKERS), *shards]),
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


# The comparison bench/run citus writes: two hot-path results, plain PostgreSQL and Citus, in one table.
#
# bench/results/citus.md, and citus.json (both results, whole). The two layouts ran
# one after the other, not alternating within a round as a hot-path run's targets do:
# a disturbance of the shared machine during one of them shows in its rounds and
# in its `other cores`, not in the other layout's.

LAYOUTS = ("postgresql", "citus")
LAYOUT_NAMES = {"postgresql": "PostgreSQL", "citus": "Citus"}
TARGET_NAMES = {"baseline": "raw SQL", "minimal": "minimal app", "service": "service"}


def comparison_table(results: dict[str, dict[str, Any]]) -> Table:
    """Per scenario, concurrency and target, each layout's medians over its rounds; Citus ÷ PostgreSQL of
    the throughput. db cpu adds up the database's backends on every node."""
    header = [
        "scenario",
        "clients",
        "unit",
        "target",
        "layout",
        "throughput",
        "Citus ÷ PostgreSQL",
        "p50 ms",
        "p99 ms",
        "cpu ms/req app",
        "db (all nodes)",
        "tx/req (coordinator)",
        "errors",
    ]
    by_key = {
        (run["scenario"], run["concurrency"], run["label"], layout): run
        for layout in LAYOUTS
        for run in medians(results[layout]["runs"])
    }
    keys = dict.fromkeys((scenario, clients, label) for scenario, clients, label, _ in by_key)
    rows = []
    for scenario, clients, label in keys:
        plain = by_key.get((scenario, clients, label, "postgresql"))
        for layout in LAYOUTS:
            run = by_key.get((scenario, clients, label, layout))
            if run is None:
                continue
            ratio = "" if layout == "postgresql" or plain is None else f"{throughput(run) / throughput(plain):.2f}"
            cpu = run["cpu_ms_per_request"]
            rows.append(
                [
                    scenario,
                    str(clients),
                    unit(run),
                    TARGET_NAMES.get(run["target"], run["target"]) + run["label"].removeprefix(run["target"]),
                    LAYOUT_NAMES[layout],
                    number(throughput(run), 0),
                    ratio,
                    number(run["p50_ms"]),
                    number(run["p99_ms"]),
                    number(cpu["app"], 2),
                    number(cpu["db"], 2),
                    number(run["transactions_per_request"], 2),
                    str(run["errors"]),
                ]
            )
    return header, rows


def statements_table(results: dict[str, dict[str, Any]]) -> Table:
    """The service's SQL statements per request on each layout, counted in-process."""
    header = ["scenario", *(f"{LAYOUT_NAMES[layout]}: statements/request" for layout in LAYOUTS), "statements"]
    counts = {layout: {count["scenario"]: count for count in results[layout]["statements"]} for layout in LAYOUTS}
    rows = []
    for scenario, plain in counts["postgresql"].items():
        citus = counts["citus"].get(scenario)
        texts = {"; ".join(plain["sql"]), "; ".join(citus["sql"]) if citus else ""} - {""}
        rows.append(
            [
                scenario,
                str(plain["statements"]),
                str(citus["statements"]) if citus else "n/a",
                " / ".join(sorted(texts)),
            ]
        )
    return header, rows


def _setup_line(layout: str, results: dict[str, Any]) -> str:
    setup = results["setup"]
    seed, end = setup["seed"], setup["end"]
    return (
        f"- {LAYOUT_NAMES[layout]}: {setup['layout']} (PostgreSQL {setup['postgresql']}); `{setup['command']}`, "
        f"started {setup['started_at']}, commit {setup['commit']}; {seed['assignments']:,} assignments at the start, "
        f"{end['assignments']:,} at the end; counts exact at the start {yes(seed['counts_exact'])}, at the end "
        f"{yes(end['counts_exact'])}"
    )


def _gunicorn_line(setup: dict[str, Any]) -> str:
    if not setup["gunicorn"]:
        return "- no HTTP target"
    settings = setup["gunicorn"][0]["settings"]
    return (
        f"- gunicorn {setup['gunicorn_version']}: {settings['worker_class']}, {settings['workers']} workers x "
        f"{settings['threads']} threads (deploy/gunicorn.conf.py)"
    )


def citus_markdown(results: dict[str, dict[str, Any]], command: str) -> str:
    plain = results["postgresql"]["setup"]
    machine = plain["machine"]
    lines = [
        *results_heading("Plain PostgreSQL and Citus on one machine", plain["started_at"], command),
        f"- Machine: {machine_text(machine)}; {machine['os']}. **Everything shares these cores**: the load clients, "
        "gunicorn, the plain PostgreSQL server and, in the Citus runs, the cluster's three PostgreSQL instances (a "
        "coordinator and 2 workers on loopback). This measures what the coordinator adds on one machine, not what "
        "more machines give.",
        *(_setup_line(layout, results[layout]) for layout in LAYOUTS),
        _gunicorn_line(plain),
        f"- {', '.join(map(str, plain['concurrency']))} clients, {plain['warmup']} s warm-up and {plain['duration']} "
        f"s measured per run, {plain['repeat']} round(s) per layout; medians over the rounds. The layouts ran one "
        "after the other, the targets alternating within each round.",
        "",
        "## Throughput and latency",
        "",
        "Throughput in subjects/s for the 1000-subject scenarios, req/s otherwise. cpu ms per request: app = "
        "gunicorn workers, db = the database's backends on every node. tx/req is the coordinator's transaction "
        "count per request.",
        "",
        as_markdown(comparison_table(results)),
        "",
        *markdown_section("## SQL statements per request (the service, in-process)", statements_table(results)),
    ]
    for layout in LAYOUTS:
        lines += markdown_section(f"## Every run: {LAYOUT_NAMES[layout]}", runs_table(results[layout]["runs"]))
    return "\n".join(lines)
