"""bench/run admin: the staff console on millions of assignments, and what the count triggers cost the hot path.

Creates a fresh database, migrates it, applies examples/demo.yaml and
bench/admin_resources.yaml, loads --assignments assignments into checkout-button
(and smaller experiments and identifier links beside it) with the count triggers
on, then times the admin pages in-process and runs the hot-path benchmark of
bench/run on the same database with the count triggers on and off.
See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from bench.admin_dataset import OLDER_EXPERIMENT, dataset_load, sample_subject
from bench.admin_pages import admin_pages, pages_measure
from bench.admin_report import admin_results_write, load_table, pages_table
from bench.preparation import prepared
from bench.profile import py_spy_path
from bench.report import as_text, count_triggers_table, gunicorn_used, main_table
from bench.rounds import Bench, HelpFormatter, shared_arguments
from bench.scenarios import EXPERIMENT_ID
from devtools import PROJECT_DIR

CONFIGS = (PROJECT_DIR / "examples" / "demo.yaml", PROJECT_DIR / "bench" / "admin_resources.yaml")


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run admin", description=__doc__.splitlines()[0], formatter_class=HelpFormatter
    )
    shared_arguments(parser)
    parser.add_argument("--assignments", type=int, default=10_000_000, help="assignments loaded into checkout-button")
    parser.add_argument("--page-runs", type=int, default=5, help="warm requests per page after the first one")
    parser.set_defaults(
        database="bench_admin",
        duration=8.0,
        concurrency=[8],
        scenarios=["1-new", "1000-new"],
        targets=["baseline", "service"],
        connections=["deployment"],
        count_triggers=["on", "off"],
        repeat=5,
        results_name="admin",
    )
    args = parser.parse_args(argv)
    if args.page_runs < 1:
        parser.error("--page-runs must be at least 1")
    # The loaded subjects are bench/run's seeded ones: its scenarios of existing subjects read them.
    args.seeded = args.assignments
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.profile:
        py_spy_path()
    with prepared(
        postgres_url=args.postgres_url, database=args.database, configs=CONFIGS, keep=args.keep_database
    ) as ready:
        database_url = ready.database_url
        print(f"loading {args.assignments:,} assignments into {EXPERIMENT_ID}", flush=True)
        load = dataset_load(database_url=database_url, assignments=args.assignments)
        print(as_text(load_table(load)))

        from assignments.models import Experiment

        experiment, older = (Experiment.objects.get(key=key) for key in (EXPERIMENT_ID, OLDER_EXPERIMENT))
        pages = admin_pages(
            experiment=(experiment.pk, experiment.key),
            older=(older.pk, older.key),
            subject_id=sample_subject(),
            subject_type="user",
        )
        print(f"pages: the first request, then {args.page_runs} more", flush=True)
        page_records = pages_measure(pages, runs=args.page_runs)

        hot_path_started = time.monotonic()
        bench = Bench(args, ready.server, database_url, ready.token)
        runs = bench.rounds()
        import django

        results = {
            "setup": {
                "started_at": ready.started_at.isoformat(timespec="seconds"),
                "command": " ".join(["bench/run", "admin", *argv]),
                "cpus": os.cpu_count(),
                "postgresql": ready.server.version(),
                "python": platform.python_version(),
                "django": django.get_version(),
                "commit": ready.commit,
                "assignments": args.assignments,
                "page_runs": args.page_runs,
                "gunicorn": gunicorn_used(runs),
                "concurrency": args.concurrency,
                "warmup": args.warmup,
                "duration": args.duration,
                "repeat": args.repeat,
                "count_triggers": args.count_triggers,
                "hot_path_seconds": time.monotonic() - hot_path_started,
            },
            "load": load,
            "pages": page_records,
            "runs": runs,
        }
        print("\nPages\n" + as_text(pages_table(page_records)))
        if runs:
            print("\nHot path, raw SQL and service\n" + as_text(main_table(runs)))
            print("\nCount triggers on and off\n" + as_text(count_triggers_table(runs)))
        json_path, markdown_path = admin_results_write(
            directory=args.results_dir, name=args.results_name, results=results
        )
        print(f"\nwrote {json_path} and {markdown_path}")
        failed = sum(run["errors"] for run in runs)
        if failed:
            print(f"{failed} requests failed; see first_error above and {bench.log_path}", file=sys.stderr)
            return 1
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
