"""bench/run: the assignment hot path over HTTP beside its raw-SQL floor, in one invocation.

Creates a fresh database, migrates it, applies examples/demo.yaml, creates a
proxy token and seeds assigned subjects; counts SQL statements per request
in-process; then, per scenario, drives the raw-SQL baseline and gunicorn (once
per connection handling) with the same concurrency, with the assignment count
triggers on or off, and prints and writes the tables (bench/results/). See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import sys
from dataclasses import asdict
from datetime import UTC, datetime

from bench.baseline import assignments_seed
from bench.connections import DEFAULT_MODES
from bench.database import DatabaseServer
from bench.hot_path import Bench, django_prepare, shared_arguments
from bench.profile import py_spy_path
from bench.report import as_text, comparison_table, git_commit, results_write, runs_table, statements_table
from bench.scenarios import SCENARIOS
from bench.server import PROJECT_DIR
from bench.statements import statements_count

DEMO_CONFIG = PROJECT_DIR / "examples" / "demo.yaml"


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run", description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    shared_arguments(parser)
    parser.add_argument("--seeded", type=int, default=50_000, help="assigned subjects that reads draw from")
    parser.set_defaults(
        database="bench_assignments",
        duration=10.0,
        scenarios=list(SCENARIOS),
        connections=list(DEFAULT_MODES),
        count_triggers=["on"],
        repeat=1,
        results_name="latest",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.profile:
        py_spy_path()
    started_at = datetime.now(UTC)
    # Before Django imports the code measured: the checkout may move on while a long run goes.
    commit = git_commit()
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
        token = django_prepare(DEMO_CONFIG)
        assignments_seed(database_url=database_url, count=args.seeded)
        scenarios = [SCENARIOS[key] for key in args.scenarios]
        counts = [asdict(count) for count in statements_count(scenarios=scenarios, token=token, seeded=args.seeded)]
        bench = Bench(args, server, database_url, token)
        runs = bench.rounds()
        import django

        results = {
            "setup": {
                "started_at": started_at.isoformat(timespec="seconds"),
                "command": " ".join(["bench/run", *argv]),
                "cpus": os.cpu_count(),
                "postgresql": server.version(),
                "python": platform.python_version(),
                "django": django.get_version(),
                "commit": commit,
                "gunicorn_workers": args.workers,
                "gunicorn_threads": args.threads,
                "concurrency": args.concurrency,
                "warmup": args.warmup,
                "duration": args.duration,
                "repeat": args.repeat,
                "seeded": args.seeded,
                "count_triggers": args.count_triggers,
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
