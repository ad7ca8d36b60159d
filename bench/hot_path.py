"""The hot path under load: the raw-SQL baseline and the service through gunicorn, measured alike.

Shared by bench/run and bench/admin: their common options, the preparation of
a bench database in-process, and the rounds of runs (CPU, transactions and
latency of each target, with the count triggers on or off).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from pathlib import Path
from typing import Any

from bench.baseline import BaselineWorker
from bench.client import ServiceWorker
from bench.connections import CONNECTION_MODES
from bench.count_triggers import COUNT_TRIGGER_STATES, count_triggers_off
from bench.cpu import CpuWindow
from bench.database import DatabaseServer
from bench.load import LoadResult, load_run
from bench.profile import profile_summary, profilers_start
from bench.scenarios import SCENARIOS, Scenario, SubjectIds
from bench.server import PROJECT_DIR, gunicorn


def _choices(raw: str, allowed, what: str) -> list[str]:
    chosen = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{what}: choose from {', '.join(allowed)} (got {raw!r})")
    return chosen


def shared_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the bench database, the load and the results; callers set their own defaults."""
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://root@127.0.0.1:5432/postgres"),
        help="a maintenance database on the server to use (env BENCH_POSTGRES_URL); the bench database "
        "is created beside it",
    )
    parser.add_argument("--database", help="name of the database to (re)create")
    parser.add_argument("--keep-database", action="store_true", help="do not drop the database at the end")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="gunicorn worker processes")
    parser.add_argument(
        "--threads", type=int, default=1, help="threads per gunicorn worker: 1 runs sync workers, more gthread ones"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients (processes)")
    parser.add_argument("--duration", type=float, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each run")
    parser.add_argument(
        "--scenarios",
        type=lambda raw: _choices(raw, SCENARIOS, "--scenarios"),
        help=f"comma-separated, from {','.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--connections",
        type=lambda raw: _choices(raw, CONNECTION_MODES, "--connections"),
        help=f"service connection handlings, from {','.join(CONNECTION_MODES)}",
    )
    parser.add_argument(
        "--count-triggers",
        type=lambda raw: _choices(raw, COUNT_TRIGGER_STATES, "--count-triggers"),
        help="run every target with the assignment count triggers on, off (ALTER TABLE ... DISABLE TRIGGER USER "
        "for the run) or both, side by side: on,off",
    )
    parser.add_argument("--repeat", type=int, help="rounds per scenario; the comparison takes each target's median")
    parser.add_argument("--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results")
    parser.add_argument("--results-name", help="file name (without extension) of the results")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the gunicorn workers with py-spy during each service run; folded stacks and a summary go "
        "to var/bench-profiles/ (profiling takes CPU from the run: do not compare its numbers)",
    )


def django_prepare(*configs: Path) -> str:
    """Migrate, apply the configuration files and create a proxy token in this process; returns the token."""
    import django
    from django.core.management import call_command

    django.setup()
    from tokens.services import api_token_create

    call_command("migrate", verbosity=0)
    call_command("apply_resources", *map(str, configs), stdout=io.StringIO())
    return api_token_create(name="bench", role="proxy")[1]


def _run_record(
    *,
    round_number: int,
    scenario: Scenario,
    target: str,
    connections: str | None,
    count_triggers: str,
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

    label = target if connections is None else f"service/{connections}"
    return {
        "round": round_number,
        "scenario": scenario.key,
        "title": scenario.title,
        "subjects_per_request": scenario.subjects,
        "target": target,
        "connections": connections,
        "count_triggers": count_triggers,
        "label": label if count_triggers == "on" else f"{label}, count triggers off",
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


def _print_run(run: dict[str, Any]) -> None:
    line = (
        f"  {run['scenario']} {run['label']:<28} {run['requests_per_second']:>9,.1f} req/s "
        f"{run['subjects_per_second']:>10,.0f} subjects/s  p50 {run['p50_ms'] or 0:.2f} ms  "
        f"p99 {run['p99_ms'] or 0:.2f} ms  errors {run['errors']}"
    )
    print(line, flush=True)
    if run["first_error"]:
        print(f"    first error: {run['first_error']}", flush=True)


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

    def baseline(self, scenario: Scenario, round_number: int, count_triggers: str) -> dict[str, Any]:
        before = self.server.transactions(self.args.database)
        # Every target and trigger state asks for subjects of its own, so "new" ones are new.
        prefix = f"{scenario.key}-baseline{_state_suffix(count_triggers)}-r{round_number}"

        def make_worker(index: int) -> BaselineWorker:
            return BaselineWorker(
                database_url=self.database_url, subject_ids=self._subject_ids(scenario, prefix, index)
            )

        result, _, db = self._measure(make_worker=make_worker, app_pids=list)
        self.server.wait_without_clients(self.args.database)
        return _run_record(
            round_number=round_number,
            scenario=scenario,
            target="baseline",
            connections=None,
            count_triggers=count_triggers,
            result=result,
            transactions=self.server.transactions(self.args.database) - before,
            app_cpu=None,
            db_cpu=db.processes,
            machine_busy_cores=db.machine_busy_cores,
        )

    def service(self, scenario: Scenario, connections: str, round_number: int, count_triggers: str) -> dict[str, Any]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "BENCH_DB_CONNECTIONS": connections,
            "BENCH_THREADS": str(self.args.threads),
            "DATABASE_URL": self.database_url,
            "DEBUG": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
        }
        prefix = f"{scenario.key}-{connections}{_state_suffix(count_triggers)}-r{round_number}"
        before = self.server.transactions(self.args.database)
        with gunicorn(
            env=env, workers=self.args.workers, threads=self.args.threads, log_path=self.log_path
        ) as http_server:

            def make_worker(index: int) -> ServiceWorker:
                ids = self._subject_ids(scenario, prefix, index)
                return ServiceWorker(host=http_server.host, port=http_server.port, token=self.token, subject_ids=ids)

            result, app, db = self._measure(
                make_worker=make_worker,
                app_pids=http_server.worker_pids,
                profile_name=prefix if self.args.profile else None,
            )
        # Backends flush their statistics when they exit: count once gunicorn's connections are gone.
        self.server.wait_without_clients(self.args.database)
        return _run_record(
            round_number=round_number,
            scenario=scenario,
            target="service",
            connections=connections,
            count_triggers=count_triggers,
            result=result,
            transactions=self.server.transactions(self.args.database) - before,
            app_cpu=app.processes,
            db_cpu=db.processes,
            machine_busy_cores=app.machine_busy_cores,
        )

    def rounds(self) -> list[dict[str, Any]]:
        """Every scenario's rounds: per round and trigger state, the baseline then each connection handling."""
        from django.db import connections

        # Load workers are forked from this process: none may inherit an open connection.
        connections.close_all()
        runs = []
        for scenario in (SCENARIOS[key] for key in self.args.scenarios):
            print(f"scenario {scenario.key}: {scenario.title} per request", flush=True)
            # Rounds alternate the targets, so a disturbance of the shared machine hits them alike.
            for round_number in range(1, self.args.repeat + 1):
                for state in self.args.count_triggers:
                    with self._count_triggers(state):
                        runs.append(self.baseline(scenario, round_number, state))
                        _print_run(runs[-1])
                        for connection_mode in self.args.connections:
                            runs.append(self.service(scenario, connection_mode, round_number, state))
                            _print_run(runs[-1])
        return runs

    def _count_triggers(self, state: str) -> contextlib.AbstractContextManager[None]:
        if state == "on":
            return contextlib.nullcontext()
        return count_triggers_off(server=self.server, database=self.args.database, database_url=self.database_url)


def _state_suffix(count_triggers: str) -> str:
    return "" if count_triggers == "on" else "-untriggered"
