"""The hot path under load: the raw-SQL baseline, the minimal apps and the service, measured alike.

Shared by the hot-path, admin and metrics benchmarks: their common options and
the rounds of runs (CPU, transactions and latency of each target at each
concurrency, with the count triggers on or off).
The service runs as deployed: gunicorn with deploy/gunicorn.conf.py
(bench/server.py) and the product's settings (config.settings); the minimal app
under that same command (minimal) and on the other servers an outside check may
pick (minimal-sync, minimal-gthread, minimal-asgi, minimal-uvicorn); and, as
targets of their own, the service with other gunicorn options or from another
git revision (ServiceTarget).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.baseline import BaselineWorker, Experiment, experiments_read
from bench.client import HttpWorker
from bench.connections import CONNECTION_MODES, DEPLOYMENT
from bench.cpu import CpuWindow, CpuWindows
from bench.database import DatabaseServer, postgres_url_argument
from bench.load import LoadResult, load_run
from bench.pools import Pool
from bench.preparation import Prepared, prepared
from bench.profile import profile_summary, profilers_start, py_spy_path
from bench.scenarios import ASSIGN, EXPERIMENT_ID, HEALTHZ, ONE_SUBJECT, SCENARIOS, Scenario, SubjectIds
from bench.server import ServerCommand, gunicorn_printed, http_server, minimal_command, service_command, worker_pids
from bench.wrk import wrk_run
from devtools import PROJECT_DIR

# In the order the first round runs them, the service's variants (ServiceTarget) after the service; each round
# after turns the order by one (Rounds._round).
TARGETS = ("baseline", "minimal", "minimal-sync", "minimal-gthread", "minimal-asgi", "minimal-uvicorn", "service")
# The minimal app on each server (bench/server.py's minimal_command); the ASGI ones on an async pool, not on Citus.
MINIMAL_TARGETS = tuple(target for target in TARGETS if target.startswith("minimal"))
ASYNC_TARGETS = ("minimal", "minimal-asgi", "minimal-uvicorn")
COUNT_TRIGGER_STATES = ("on", "off")
LOADS = ("python", "wrk")

GUNICORN_SIZE = ("GUNICORN_WORKERS", "DATABASE_POOL_SIZE")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help, unless it has none; the description and epilog as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.help is None:
            return action.help
        if isinstance(action.default, list):
            return f"{action.help} (default: {','.join(map(str, action.default))})"
        return super()._get_help_string(action)

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        return action.dest.upper()


def _choices(raw: str, allowed, what: str) -> list[str]:
    chosen = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{what}: choose from {', '.join(allowed)} (got {raw!r})")
    return chosen


def _concurrencies(raw: str) -> list[int]:
    try:
        values = [int(item) for item in raw.split(",") if item.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--concurrency: comma-separated positive integers (got {raw!r})")
    return values


def shared_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the bench database, the load and the results; callers set their own defaults."""
    postgres_url_argument(
        parser,
        "a maintenance database on the server to use (env BENCH_POSTGRES_URL); the bench database is created beside it",
    )
    parser.add_argument("--database", help="name of the bench database")
    parser.add_argument("--keep-database", action="store_true", help="do not drop the database at the end")
    parser.add_argument(
        "--workers",
        type=int,
        help="gunicorn worker processes of the service, passed as GUNICORN_WORKERS, and of the minimal, "
        "minimal-gthread and minimal-asgi targets, which take the service's (default: what "
        "deploy/gunicorn.conf.py gives; minimal-sync and minimal-uvicorn have their own: bench/server.py)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="database connections per worker of the service, passed as DATABASE_POOL_SIZE; the threads of "
        "minimal and minimal-gthread, and the connections of minimal-asgi's and minimal-uvicorn's pool per "
        "process (default: what config/settings.py gives)",
    )
    parser.add_argument(
        "--concurrency",
        type=_concurrencies,
        help="concurrent clients (processes, one connection each), comma-separated: every scenario runs at each",
    )
    parser.add_argument("--duration", type=float, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each run")
    # The options that take a comma-separated choice of several: what they choose from, and their help.
    for option, allowed, help_text in (
        ("--scenarios", SCENARIOS, f"comma-separated, from {','.join(SCENARIOS)}"),
        (
            "--targets",
            TARGETS,
            "comma-separated, from baseline (raw SQL over psycopg, no HTTP), minimal (bench/minimal_app.py: "
            "plain WSGI under the service's own gunicorn command), minimal-sync and minimal-gthread (the same app "
            "on plain gunicorn sync and gthread workers), minimal-asgi (bench/minimal_asgi.py, the same answers "
            "and statements on a psycopg async pool, under gunicorn's ASGI worker with uvloop), minimal-uvicorn "
            "(the same ASGI app on uvicorn, uvloop and httptools) and service (config.wsgi under gunicorn, as "
            "deployed); the start command of each is in the results",
        ),
        (
            "--connections",
            CONNECTION_MODES,
            f"the service's database connection handling, comma-separated, from {','.join(CONNECTION_MODES)}: "
            f"{DEPLOYMENT} is config.settings as is; the others are variations of it (bench/connections.py)",
        ),
        (
            "--count-triggers",
            COUNT_TRIGGER_STATES,
            "run every target with the assignment count triggers on, off (ALTER TABLE ... DISABLE TRIGGER USER "
            "for the run) or both, side by side: on,off",
        ),
    ):
        parser.add_argument(option, type=functools.partial(_choices, allowed=allowed, what=option), help=help_text)
    parser.add_argument(
        "--load",
        choices=LOADS,
        default="python",
        help="what drives the HTTP targets: python (load.py's worker processes, each answer's body checked) or wrk "
        "(the native generator, whose own CPU is a fraction of theirs; status codes checked; raw SQL not run): "
        "bench/wrk.py",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        help="rounds per scenario and concurrency, the targets in turn within each, their order turned by one "
        "each round; tables show each target's median",
    )
    parser.add_argument(
        "--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results", help="where the results are written"
    )
    parser.add_argument("--results-name", help="file name (without extension) of the results")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the service's gunicorn workers with py-spy during each run; folded stacks and a summary go "
        "to var/bench-profiles/ (profiling takes CPU from the run: do not compare its numbers)",
    )


def seeded_check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.seeded < 1000:
        parser.error("--seeded must be at least 1000: the 1000-existing scenario samples that many")


def bench_prepared(
    args: argparse.Namespace, configs: Sequence[Path], **options: Any
) -> contextlib.AbstractContextManager[Prepared]:
    """The bench database of the shared options (preparation.prepared), once py-spy is found if --profile asks for
    it: a missing py-spy stops the benchmark before it prepares anything. The scenarios of subjects stored in more
    experiments than checkout-button (Scenario.existing_among) have those seeded too."""
    if args.profile:
        py_spy_path()
    among = [SCENARIOS[key] for key in args.scenarios if SCENARIOS[key].existing_among]
    also = sorted({key for scenario in among for key in scenario.named if key.lower() != EXPERIMENT_ID.lower()})
    return prepared(
        postgres_url=args.postgres_url,
        database=args.database,
        configs=configs,
        keep=args.keep_database,
        stored_in=also,
        stored_count=max((scenario.existing_among for scenario in among), default=0),
        **options,
    )


@dataclass(frozen=True)
class ServiceTarget:
    """The service as a target of its own beside `service`: with gunicorn options added (--service-variant) or
    from another git revision's worktree (--service-at), with this checkout's virtualenv, database and token."""

    name: str
    options: tuple[str, ...] = ()
    root: Path = PROJECT_DIR
    revision: str | None = None
    commit: str | None = None

    def command(self) -> ServerCommand:
        source = None if self.revision is None else f"git worktree of {self.revision} ({self.commit})"
        return service_command(root=self.root, options=self.options, source=source)


def _run_record(
    scenario: Scenario,
    concurrency: int,
    round_number: int,
    count_triggers: str,
    *,
    target: str,
    connections: str | None,
    gunicorn_used: dict[str, Any] | None,
    command: str | None,
    result: LoadResult,
    prefix: str,
    transactions: int,
    app_cpu: float | None,
    db_cpu: float | None,
    machine_busy_cores: float | None,
) -> dict[str, Any]:
    def per_request_ms(seconds: float | None) -> float | None:
        return None if seconds is None or not result.requests else seconds * 1000 / result.requests

    def ms(value: float | None) -> float | None:
        return None if value is None else value * 1000

    label = _label(target, connections)
    return {
        "round": round_number,
        "scenario": scenario.key,
        "title": scenario.title,
        "reference": scenario.reference,
        "subjects_per_request": scenario.subjects,
        "per_subject": scenario.per_subject,
        "concurrency": concurrency,
        "target": target,
        "connections": connections,
        "count_triggers": count_triggers,
        "label": label if count_triggers == "on" else f"{label}, count triggers off",
        "gunicorn": gunicorn_used,
        # How the target's server started, $PORT a free port.
        "command": command,
        "duration": result.duration,
        # Of the subject IDs the run asked for: its rows are found by it.
        "prefix": prefix,
        "subjects_sent": result.sent * scenario.subjects,
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
        if machine_busy_cores is None or db_cpu is None or (app_cpu is None and target != "baseline")
        else machine_busy_cores - ((app_cpu or 0.0) + db_cpu + result.client_cpu_seconds) / result.duration,
    }


def _print_run(run: dict[str, Any]) -> None:
    line = (
        f"  {run['scenario']} c{run['concurrency']} r{run['round']} {run['label']:<24} "
        f"{run['requests_per_second']:>9,.1f} req/s {run['subjects_per_second']:>10,.0f} subjects/s  "
        f"p50 {run['p50_ms'] or 0:.2f} ms  p99 {run['p99_ms'] or 0:.2f} ms  errors {run['errors']}"
    )
    print(line, flush=True)
    if run["first_error"]:
        print(f"    first error: {run['first_error']}", flush=True)


class Bench:
    def __init__(
        self,
        args: argparse.Namespace,
        server: DatabaseServer,
        database_url: str,
        token: str,
        *,
        workers: Sequence[DatabaseServer] = (),
    ) -> None:
        """`workers`: a Citus cluster's worker nodes beside the coordinator `server`, whose backends do
        the shards' work and count in the database's CPU."""
        self.args = args
        self.server = server
        self.database_url = database_url
        self.token = token
        # New subject IDs start with it: they are new even in a database an earlier run left behind.
        self.run_id = secrets.token_hex(4)
        self.nodes = [(node, node.postmaster_pid()) for node in (server, *workers)]
        self.log_path = PROJECT_DIR / "var" / "bench-gunicorn.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # This invocation's servers only (with GUNICORN_ACCESS_LOG=true, a line per request).
        self.log_path.write_text("")
        self.profile_dir = PROJECT_DIR / "var" / "bench-profiles"
        # The linked new cookies of the scenarios with linked_every (bench/links.py) and the holdout members of
        # those with members (bench/memberships.py); bench/run hot-path sets them.
        self.links: Pool | None = None
        self.members: Pool | None = None
        # Every experiment's configuration, read when the rounds start: what the HTTP load workers check
        # their answers against.
        self.catalog: dict[str, Experiment] = {}
        # The service's variants, by target name (service-<name>); bench/run hot-path sets them.
        self.services: dict[str, ServiceTarget] = {}
        # The service's workers and database connections per worker, which the minimal targets take.
        self._service_size: tuple[int, int] | None = None
        # The targets whose start command was printed.
        self._announced: set[str] = set()

    def _experiments(self, scenario: Scenario) -> list[Experiment]:
        if scenario.kind in (ASSIGN, *ONE_SUBJECT):
            return [self.catalog[key.lower()] for key in scenario.named]
        return []

    def _pool(self, scenario: Scenario) -> Pool | None:
        if scenario.linked_every:
            if self.links is None:
                raise RuntimeError(f"scenario {scenario.key} needs the identifier links bench/run hot-path seeds")
            return self.links
        if scenario.members:
            if self.members is None:
                raise RuntimeError(f"scenario {scenario.key} needs the holdout members bench/run hot-path stores")
            return self.members
        return None

    def subject_ids(self, scenario: Scenario, prefix: str, index: int) -> SubjectIds:
        return SubjectIds(
            scenario=scenario,
            prefix=f"{prefix}-{index}",
            seeded=self.args.seeded,
            seed=index,
            pool=self._pool(scenario),
        )

    @contextlib.contextmanager
    def pooled(self, scenario: Scenario) -> Iterator[dict[str, str]]:
        """Around one run: what the pool IDs it may take need stored before it starts. Yields a dict that
        names, once the run is over, the first and the last pool ID it took (none without a pool)."""
        pool = self._pool(scenario)
        span: dict[str, str] = {}
        if pool is None:
            yield span
            return
        pool.top_up(seconds=self.args.warmup + self.args.duration)
        start = pool.taken
        try:
            yield span
        finally:
            pool.run_ended()
            if pool.taken > start:
                span.update(first=pool.subject_id(start), last=pool.subject_id(pool.taken - 1))

    def _pooled_run(self, scenario: Scenario, run) -> dict[str, Any]:
        with self.pooled(scenario) as span:
            record = run()
        record["pool_span"] = span or None
        return record

    def _prefix(self, scenario: Scenario, label: str, concurrency: int, round_number: int) -> str:
        """Of the new subject IDs of one run: every run asks for its own, so they are new."""
        return f"{self.run_id}-{scenario.key}-{label.replace('/', '-')}-c{concurrency}-r{round_number}"

    def _measure(
        self,
        *,
        make_worker,
        concurrency: int,
        app_pids,
        app_parent: int | None,
        profile_name: str | None = None,
        drive=None,
    ) -> tuple[LoadResult, CpuWindow, CpuWindows]:
        """One run's load with the CPU windows around its measured part: the Python load workers of
        `make_worker`, or `drive(on_start, on_end)` (wrk.py) when given."""
        app = CpuWindow(app_pids, parent=app_parent)
        # Each node's postmaster reaps the backends of connections that end within the window (CpuWindow).
        db = CpuWindows(
            [
                CpuWindow(lambda node=node: node.backend_pids(self.args.database), parent=postmaster)
                for node, postmaster in self.nodes
            ]
        )
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

        if drive is not None:
            result = drive(start, end)
        else:
            result = load_run(
                make_worker=make_worker,
                concurrency=concurrency,
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

    def requests_failed(self, runs: list[dict[str, Any]]) -> bool:
        """Whether a request of the runs failed, said on standard error with where to look."""
        failed = sum(run["errors"] for run in runs)
        if failed:
            print(f"{failed} requests failed; see first_error above and {self.log_path}", file=sys.stderr)
        return bool(failed)

    def _transactions_since(self, before: int) -> int:
        """The bench database's transactions since the count `before`, counted once the run's connections are gone:
        backends flush their statistics when they exit."""
        self.server.wait_without_clients(self.args.database)
        return self.server.transactions(self.args.database) - before

    def baseline(self, scenario: Scenario, concurrency: int, round_number: int, count_triggers: str) -> dict[str, Any]:
        before = self.server.transactions(self.args.database)
        prefix = self._prefix(scenario, f"baseline{_state_suffix(count_triggers)}", concurrency, round_number)

        def make_worker(index: int) -> BaselineWorker:
            return BaselineWorker(
                database_url=self.database_url,
                scenario=scenario,
                subject_ids=self.subject_ids(scenario, prefix, index),
            )

        result, _, db = self._measure(make_worker=make_worker, concurrency=concurrency, app_pids=list, app_parent=None)
        return _run_record(
            scenario,
            concurrency,
            round_number,
            count_triggers,
            target="baseline",
            connections=None,
            gunicorn_used=None,
            command=None,
            result=result,
            prefix=prefix,
            transactions=self._transactions_since(before),
            app_cpu=None,
            db_cpu=db.processes,
            machine_busy_cores=db.machine_busy_cores,
        )

    def service_size(self) -> tuple[int, int]:
        """The service's gunicorn workers (deploy/gunicorn.conf.py with --workers), asked of gunicorn, and its
        database connections per worker (config/settings.py with --threads), asked of Django; once."""
        if self._service_size is None:
            env = self._env("service", DEPLOYMENT)
            settings = gunicorn_printed(service_command(), env)
            self._service_size = settings["workers"], django_setting("DATABASE_POOL_SIZE", env)
        return self._service_size

    def _command(self, target: str, env: dict[str, str]) -> ServerCommand:
        """How the target's server starts; its environment additions for the minimal apps are in env already."""
        if target == "service":
            return service_command()
        if target in self.services:
            return self.services[target].command()
        workers, threads = self.service_size()
        shown = {name: "$TOKEN" if name == "BENCH_TOKEN" else env[name] for name in MINIMAL_ENV if name in env}
        return minimal_command(target, workers=workers, threads=threads, env=shown)

    def _env(self, target: str, connections: str | None) -> dict[str, str]:
        """The deployment's environment (README, docs/how-to/deploy.md) for one HTTP target."""
        # Only --workers and --threads set these two: otherwise the config file's defaults apply. Other
        # GUNICORN_* variables pass through, and the results name what gunicorn resolved.
        env = {name: value for name, value in os.environ.items() if name not in GUNICORN_SIZE}
        env.update(
            DATABASE_URL=self.database_url,
            DEBUG="false",
            SECRET_KEY=os.environ["SECRET_KEY"],
            ALLOWED_HOSTS="127.0.0.1,localhost",
            DJANGO_SETTINGS_MODULE="config.settings",
        )
        if self.args.workers is not None:
            env["GUNICORN_WORKERS"] = str(self.args.workers)
        if self.args.threads is not None:
            env["DATABASE_POOL_SIZE"] = str(self.args.threads)
        if target in MINIMAL_TARGETS:
            env["BENCH_TOKEN"] = self.token
            if target in ASYNC_TARGETS:
                env["BENCH_POOL_SIZE"] = str(self.service_size()[1])
        elif connections != DEPLOYMENT:
            env.update(DJANGO_SETTINGS_MODULE="bench.settings", BENCH_DB_CONNECTIONS=connections)
        return env

    def http(
        self,
        target: str,
        scenario: Scenario,
        concurrency: int,
        round_number: int,
        count_triggers: str,
        connections: str | None = None,
    ) -> dict[str, Any]:
        """One run of an HTTP target (a minimal app or the service), its server started for it and stopped
        after it."""
        env = self._env(target, connections)
        command = self._command(target, env)
        settings = gunicorn_printed(command, env) if command.gunicorn else None
        # The pool of a connection variation holds as many connections as a worker of the service.
        env["BENCH_THREADS"] = str(self.service_size()[1])
        label = _label(target, connections)
        if label not in self._announced:
            self._announced.add(label)
            print(f"  {label}: {command.text()}", flush=True)
        prefix = self._prefix(scenario, label + _state_suffix(count_triggers), concurrency, round_number)
        before = self.server.transactions(self.args.database)
        workers = settings["workers"] if settings else command.workers
        with http_server(command=command, env=env, workers=workers, log_path=self.log_path) as target_server:

            def make_worker(index: int) -> HttpWorker:
                ids = self.subject_ids(scenario, prefix, index)
                return HttpWorker(
                    host=target_server.host,
                    port=target_server.port,
                    token=self.token,
                    scenario=scenario,
                    subject_ids=ids,
                    experiments=self._experiments(scenario),
                )

            def drive(on_start, on_end) -> LoadResult:
                return wrk_run(
                    url=f"http://{target_server.host}:{target_server.port}",
                    scenario=scenario,
                    token=self.token,
                    prefix=prefix,
                    seeded=self.args.seeded,
                    concurrency=concurrency,
                    warmup=self.args.warmup,
                    duration=self.args.duration,
                    on_start=on_start,
                    on_end=on_end,
                )

            result, app, db = self._measure(
                make_worker=make_worker,
                concurrency=concurrency,
                app_pids=lambda: worker_pids(target_server),
                app_parent=target_server.process.pid,
                profile_name=prefix if self.args.profile and target.startswith("service") else None,
                drive=drive if self.args.load == "wrk" else None,
            )
        return _run_record(
            scenario,
            concurrency,
            round_number,
            count_triggers,
            target=target,
            connections=connections,
            gunicorn_used=settings,
            command=command.text(),
            result=result,
            prefix=prefix,
            transactions=self._transactions_since(before),
            app_cpu=app.processes,
            db_cpu=db.processes,
            machine_busy_cores=app.machine_busy_cores,
        )

    def _round(self, scenario: Scenario, concurrency: int, round_number: int, state: str) -> Iterator[dict[str, Any]]:
        """The round's runs, one per target, the order turned by one place each round: a target that always ran
        right after another, or on a table always the same size, would read up to a tenth apart for the same
        code (bench/results/recycling.md). Over as many rounds as targets, each runs once in every place."""
        runs = []
        for target in [target for target in TARGETS if target in self.args.targets] + list(self.services):
            if target == "baseline":
                # Raw SQL has no HTTP to drive, and no /healthz.
                if scenario.kind != HEALTHZ and self.args.load == "python":
                    runs.append(lambda: self.baseline(scenario, concurrency, round_number, state))
            elif target in MINIMAL_TARGETS:
                runs.append(lambda target=target: self.http(target, scenario, concurrency, round_number, state))
            elif target == "service":
                runs += [
                    lambda mode=mode: self.http("service", scenario, concurrency, round_number, state, connections=mode)
                    for mode in self.args.connections
                ]
            else:
                # A variant of the service runs with the deployment's connections.
                runs.append(
                    lambda target=target: self.http(
                        target, scenario, concurrency, round_number, state, connections=DEPLOYMENT
                    )
                )
        turn = (round_number - 1) % len(runs) if runs else 0
        for run in runs[turn:] + runs[:turn]:
            yield self._pooled_run(scenario, run)

    def rounds(self) -> list[dict[str, Any]]:
        """At each concurrency, the rounds: in each, every scenario in turn, and per scenario and trigger state,
        each target in turn."""
        from django.db import connections

        # Load workers are forked from this process: none may inherit an open connection.
        connections.close_all()
        with psycopg.connect(self.database_url, autocommit=True) as connection:
            self.catalog = experiments_read(connection)
        scenarios = [SCENARIOS[key] for key in self.args.scenarios]
        runs = []
        for concurrency in self.args.concurrency:
            # Rounds alternate the scenarios as well as the targets, so a disturbance of the shared machine
            # hits them alike and a ratio of two scenarios can pair runs of one round; every other round
            # takes them in reverse order, since the table grows as they run.
            for round_number in range(1, self.args.repeat + 1):
                for scenario in scenarios if round_number % 2 else reversed(scenarios):
                    print(
                        f"scenario {scenario.key} ({scenario.title} per request), {concurrency} clients, "
                        f"round {round_number}",
                        flush=True,
                    )
                    for state in self.args.count_triggers:
                        with self._count_triggers(state):
                            for run in self._round(scenario, concurrency, round_number, state):
                                _print_run(run)
                                runs.append(run)
        return runs

    def _count_triggers(self, state: str) -> contextlib.AbstractContextManager[None]:
        if state == "on":
            return contextlib.nullcontext()
        return count_triggers_off(server=self.server, database=self.args.database, database_url=self.database_url)


# What the start commands of the minimal targets show of their environment (the token as $TOKEN): every target
# has the deployment's environment besides (DATABASE_URL, DEBUG=false, ...: Bench._env).
MINIMAL_ENV = ("BENCH_TOKEN", "BENCH_POOL_SIZE")


def django_setting(name: str, env: dict[str, str]) -> Any:
    """A setting of the service as config/settings.py resolves it in `env`."""
    code = f"from django.conf import settings; print(repr(settings.{name}))"
    printed = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=PROJECT_DIR,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return ast.literal_eval(printed.strip().splitlines()[-1])


def _label(target: str, connections: str | None) -> str:
    """The target, and the service's connection handling when it is a variation of the deployment's."""
    return target if connections in (None, DEPLOYMENT) else f"{target}/{connections}"


def _state_suffix(count_triggers: str) -> str:
    return "" if count_triggers == "on" else "-untriggered"


# Runs without the triggers that keep assignments_assignmentcount (--count-triggers off), to see what they cost
# the hot path.
#
# The triggers (assignments/migrations/0004_assignment_count_triggers.py) add a
# grouped upsert to every INSERT of assignments, in the same transaction. For an
# "off" run they are disabled on the bench database; afterwards they are enabled
# again and the assignments stored meanwhile are counted in one statement, so a
# database kept with --keep-database still shows exact counts in the admin.

# USER: the count triggers only; the foreign keys' internal triggers stay on.
TRIGGERS_DISABLE = "ALTER TABLE assignments_assignment DISABLE TRIGGER USER"
TRIGGERS_ENABLE = "ALTER TABLE assignments_assignment ENABLE TRIGGER USER"

# The triggers' own upsert, as the migration's first fill uses it (shard 0), over what was stored since
# they were disabled: every run targets one experiment, so its (experiment_id, created_at) index finds those
# rows. Taken from the migration so that it always writes the columns the triggers write.
_count_triggers_migration = importlib.import_module("assignments.migrations.0004_assignment_count_triggers")
COUNTS_CATCH_UP = _count_triggers_migration.POSTGRES_UPSERT.format(
    shard="0",
    sign="",
    rows="""(SELECT * FROM assignments_assignment
            WHERE experiment_id = (SELECT id FROM assignments_experiment WHERE lower(key) = lower(%s))
            AND created_at >= %s) AS stored""",
)


@contextlib.contextmanager
def count_triggers_off(*, server: DatabaseServer, database: str, database_url: str) -> Iterator[None]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(TRIGGERS_DISABLE)
        (disabled_at,) = connection.execute("SELECT clock_timestamp()").fetchone()
    # Its transactions must be counted before the first run reads the database's counter.
    server.wait_without_clients(database)
    try:
        yield
    finally:
        # One transaction: ALTER TABLE keeps writers out until it commits, so every assignment is
        # counted once, by the catch-up or by the triggers.
        with psycopg.connect(database_url) as connection:
            connection.execute(TRIGGERS_ENABLE)
            connection.execute(COUNTS_CATCH_UP, [EXPERIMENT_ID, disabled_at])
        server.wait_without_clients(database)
