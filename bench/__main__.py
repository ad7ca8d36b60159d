"""bench/run: the assignment hot path over HTTP beside its raw-SQL floor, in one invocation.

Creates a fresh database, migrates it, applies examples/demo.yaml, creates a
proxy token and seeds assigned subjects; counts SQL statements per request
in-process; then, per scenario, drives the raw-SQL baseline and gunicorn (once
per connection handling) with the same concurrency, and prints and writes the
tables (bench/results/). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import secrets
import subprocess
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.baseline import BaselineWorker, assignments_seed
from bench.client import ServiceWorker
from bench.connections import CONNECTION_MODES, DEFAULT_MODES
from bench.cpu import CpuWindow
from bench.database import DatabaseServer
from bench.load import LoadResult, load_run
from bench.profile import profile_summary, profilers_start, py_spy_path
from bench.report import as_text, comparison_table, results_write, runs_table, statements_table
from bench.scenarios import SCENARIOS, Scenario, SubjectIds
from bench.server import PROJECT_DIR, gunicorn
from bench.statements import statements_count

DEMO_CONFIG = PROJECT_DIR / "examples" / "demo.yaml"


def _choices(raw: str, allowed, what: str) -> list[str]:
    chosen = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{what}: choose from {', '.join(allowed)} (got {raw!r})")
    return chosen


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://root@127.0.0.1:5432/postgres"),
        help="a maintenance database on the server to use (env BENCH_POSTGRES_URL); the bench database "
        "is created beside it",
    )
    parser.add_argument("--database", default="bench_assignments", help="name of the database to (re)create")
    parser.add_argument("--keep-database", action="store_true", help="do not drop the database at the end")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="gunicorn worker processes")
    parser.add_argument(
        "--threads", type=int, default=1, help="threads per gunicorn worker: 1 runs sync workers, more gthread ones"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients (processes)")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each run")
    parser.add_argument(
        "--scenarios",
        type=lambda raw: _choices(raw, SCENARIOS, "--scenarios"),
        default=list(SCENARIOS),
        help=f"comma-separated, from {','.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--connections",
        type=lambda raw: _choices(raw, CONNECTION_MODES, "--connections"),
        default=list(DEFAULT_MODES),
        help=f"service connection handlings, from {','.join(CONNECTION_MODES)}",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds per scenario; the comparison takes each target's median"
    )
    parser.add_argument("--seeded", type=int, default=50_000, help="assigned subjects that reads draw from")
    parser.add_argument("--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results")
    parser.add_argument("--results-name", default="latest", help="file name (without extension) of the results")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the gunicorn workers with py-spy during each service run; folded stacks and a summary go "
        "to var/bench-profiles/ (profiling takes CPU from the run: do not compare its numbers)",
    )
    return parser.parse_args(argv)


def _git_commit() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit}{' (with uncommitted changes)' if dirty else ''}"


def _prepare_django(database_url: str) -> str:
    """Migrate, apply the demo configuration and create a proxy token in this process; returns the token."""
    import django
    from django.core.management import call_command

    django.setup()
    from tokens.services import api_token_create

    call_command("migrate", verbosity=0)
    call_command("apply_resources", str(DEMO_CONFIG), stdout=io.StringIO())
    return api_token_create(name="bench", role="proxy")[1]


def _run_record(
    *,
    round_number: int,
    scenario: Scenario,
    target: str,
    connections: str | None,
    result: LoadResult,
    transactions: int,
    app_cpu: float | None,
    db_cpu: float | None,
    machine_busy_cores: float | None,
) -> dict[str, Any]:
    def per_request_ms(seconds: float | None) -> float | None:
        return None if seconds is None or not result.requests else seconds * 1000 / result.requests

    def ms(value: float | None) -> float | None:
        return None if value is None else value * 1000

    return {
        "round": round_number,
        "scenario": scenario.key,
        "title": scenario.title,
        "subjects_per_request": scenario.subjects,
        "target": target,
        "connections": connections,
        "label": target if connections is None else f"service/{connections}",
        "duration": result.duration,
        "requests": result.requests,
        "requests_per_second": result.requests / result.duration,
        "subjects_per_second": result.subjects / result.duration,
        "p50_ms": ms(result.percentile(0.50)),
        "p95_ms": ms(result.percentile(0.95)),
        "p99_ms": ms(result.percentile(0.99)),
        "max_ms": ms(result.latencies[-1] if result.latencies else None),
        "errors": result.errors,
        "first_error": result.first_error,
        "transactions_per_request": transactions / result.sent if result.sent else None,
        "cpu_ms_per_request": {
            "app": per_request_ms(app_cpu),
            "db": per_request_ms(db_cpu),
            "client": per_request_ms(result.client_cpu_seconds),
        },
        "machine_busy_cores": machine_busy_cores,
        # CPU the machine spent on anything but this run's processes: other people's work, or
        # kernel time not charged to them. Large values mean the run was disturbed.
        "other_cores": None
        if machine_busy_cores is None or db_cpu is None or (app_cpu is None and target == "service")
        else machine_busy_cores - ((app_cpu or 0.0) + db_cpu + result.client_cpu_seconds) / result.duration,
    }


class Bench:
    def __init__(self, args: argparse.Namespace, server: DatabaseServer, database_url: str, token: str) -> None:
        self.args = args
        self.server = server
        self.database_url = database_url
        self.token = token
        self.log_path = PROJECT_DIR / "var" / "bench-gunicorn.log"
        self.profile_dir = PROJECT_DIR / "var" / "bench-profiles"

    def _subject_ids(self, scenario: Scenario, prefix: str, index: int) -> SubjectIds:
        return SubjectIds(scenario=scenario, prefix=f"{prefix}-{index}", seeded=self.args.seeded, seed=index)

    def _measure(
        self, *, make_worker, app_pids, profile_name: str | None = None
    ) -> tuple[LoadResult, CpuWindow, CpuWindow]:
        app = CpuWindow(app_pids)
        db = CpuWindow(lambda: self.server.backend_pids(self.args.database))
        profilers = []

        def start() -> None:
            app.start()
            db.start()
            if profile_name is not None:
                profilers.extend(
                    profilers_start(
                        pids=app_pids(), seconds=self.args.duration, directory=self.profile_dir, name=profile_name
                    )
                )

        def end() -> None:
            app.end()
            db.end()

        result = load_run(
            make_worker=make_worker,
            concurrency=self.args.concurrency,
            warmup=self.args.warmup,
            duration=self.args.duration,
            on_start=start,
            on_end=end,
        )
        for profiler in profilers:
            profiler.wait(timeout=60)
        if profile_name is not None:
            summary = profile_summary(sorted(self.profile_dir.glob(f"{profile_name}-*.folded")))
            (self.profile_dir / f"{profile_name}.txt").write_text(summary + "\n")
            print(f"    profile: {self.profile_dir / profile_name}.txt", flush=True)
        return result, app, db

    def baseline(self, scenario: Scenario, round_number: int) -> dict[str, Any]:
        before = self.server.transactions(self.args.database)

        def make_worker(index: int) -> BaselineWorker:
            ids = self._subject_ids(scenario, f"{scenario.key}-baseline-r{round_number}", index)
            return BaselineWorker(database_url=self.database_url, subject_ids=ids)

        result, _, db = self._measure(make_worker=make_worker, app_pids=list)
        self.server.wait_without_clients(self.args.database)
        return _run_record(
            round_number=round_number,
            scenario=scenario,
            target="baseline",
            connections=None,
            result=result,
            transactions=self.server.transactions(self.args.database) - before,
            app_cpu=None,
            db_cpu=db.processes,
            machine_busy_cores=db.machine_busy_cores,
        )

    def service(self, scenario: Scenario, connections: str, round_number: int) -> dict[str, Any]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "BENCH_DB_CONNECTIONS": connections,
            "BENCH_THREADS": str(self.args.threads),
            "DATABASE_URL": self.database_url,
            "DEBUG": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
        }
        before = self.server.transactions(self.args.database)
        with gunicorn(
            env=env, workers=self.args.workers, threads=self.args.threads, log_path=self.log_path
        ) as http_server:

            def make_worker(index: int) -> ServiceWorker:
                ids = self._subject_ids(scenario, f"{scenario.key}-{connections}-r{round_number}", index)
                return ServiceWorker(host=http_server.host, port=http_server.port, token=self.token, subject_ids=ids)

            result, app, db = self._measure(
                make_worker=make_worker,
                app_pids=http_server.worker_pids,
                profile_name=f"{scenario.key}-{connections}-r{round_number}" if self.args.profile else None,
            )
        # Backends flush their statistics when they exit: count once gunicorn's connections are gone.
        self.server.wait_without_clients(self.args.database)
        return _run_record(
            round_number=round_number,
            scenario=scenario,
            target="service",
            connections=connections,
            result=result,
            transactions=self.server.transactions(self.args.database) - before,
            app_cpu=app.processes,
            db_cpu=db.processes,
            machine_busy_cores=app.machine_busy_cores,
        )


def _print_run(run: dict[str, Any]) -> None:
    line = (
        f"  {run['scenario']} {run['label']:<28} {run['requests_per_second']:>9,.1f} req/s "
        f"{run['subjects_per_second']:>10,.0f} subjects/s  p50 {run['p50_ms'] or 0:.2f} ms  "
        f"p99 {run['p99_ms'] or 0:.2f} ms  errors {run['errors']}"
    )
    print(line, flush=True)
    if run["first_error"]:
        print(f"    first error: {run['first_error']}", flush=True)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.profile:
        py_spy_path()
    started_at = datetime.now(UTC)
    server = DatabaseServer(args.postgres_url)
    database_url = server.recreate(args.database)
    os.environ.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="config.settings",
        DEBUG="false",
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    )
    try:
        print(f"database {args.database}: migrating, applying {DEMO_CONFIG.name}, seeding {args.seeded:,} subjects")
        token = _prepare_django(database_url)
        assignments_seed(database_url=database_url, count=args.seeded)
        scenarios = [SCENARIOS[key] for key in args.scenarios]
        counts = [asdict(count) for count in statements_count(scenarios=scenarios, token=token, seeded=args.seeded)]
        from django.db import connections

        # Load workers are forked from this process: none may inherit an open connection.
        connections.close_all()
        bench = Bench(args, server, database_url, token)
        runs = []
        for scenario in scenarios:
            print(f"scenario {scenario.key}: {scenario.title} per request", flush=True)
            # Rounds alternate the targets, so a disturbance of the shared machine hits them alike.
            for round_number in range(1, args.repeat + 1):
                runs.append(bench.baseline(scenario, round_number))
                _print_run(runs[-1])
                for connection_mode in args.connections:
                    runs.append(bench.service(scenario, connection_mode, round_number))
                    _print_run(runs[-1])
        import django

        results = {
            "setup": {
                "started_at": started_at.isoformat(timespec="seconds"),
                "command": " ".join(["bench/run", *argv]),
                "cpus": os.cpu_count(),
                "postgresql": server.version(),
                "python": platform.python_version(),
                "django": django.get_version(),
                "commit": _git_commit(),
                "gunicorn_workers": args.workers,
                "gunicorn_threads": args.threads,
                "concurrency": args.concurrency,
                "warmup": args.warmup,
                "duration": args.duration,
                "repeat": args.repeat,
                "seeded": args.seeded,
            },
            "runs": runs,
            "statements": counts,
        }
        print("\nService vs raw-SQL baseline\n" + as_text(comparison_table(runs)))
        print("\nEvery run (cpu ms per request: app = gunicorn workers, db = PostgreSQL backends)\n")
        print(as_text(runs_table(runs)))
        print("\nSQL statements per request (in-process)\n" + as_text(statements_table(counts)))
        json_path, markdown_path = results_write(directory=args.results_dir, name=args.results_name, results=results)
        print(f"\nwrote {json_path} and {markdown_path}")
        failed = sum(run["errors"] for run in runs)
        if failed:
            print(f"{failed} requests failed; see first_error above and {bench.log_path}", file=sys.stderr)
            return 1
        return 0
    finally:
        if not args.keep_database:
            # WITH (FORCE) also ends this process's own Django connection, if one is open.
            server.drop(args.database)
        server.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
