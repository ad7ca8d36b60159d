"""bench/run admin: the staff console on millions of assignments, and what the count triggers cost the hot path.

Creates a fresh database, migrates it, applies examples/demo.yaml and
bench/admin/resources.yaml, loads --assignments assignments into checkout-button
(and smaller experiments and identifier links beside it: dataset.py) with the
count triggers on, then times the admin pages in-process (pages.py) and runs the
rounds of bench/run hot-path on the same database with the count triggers on and
off. Its results, printed and in bench/results/<name>.md and .json, are written
here. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from bench.admin.dataset import OLDER_EXPERIMENT, dataset_load, sample_subject
from bench.admin.pages import TARGET_MS, admin_pages, pages_measure
from bench.report import (
    Table,
    as_markdown,
    as_text,
    count_triggers_table,
    gunicorn_used,
    main_table,
    markdown_section,
    number,
    results_files_write,
    results_heading,
    runs_table,
    yes,
)
from bench.rounds import Bench, HelpFormatter, bench_prepared, shared_arguments
from bench.scenarios import EXPERIMENT_ID
from devtools import PROJECT_DIR

CONFIGS = (PROJECT_DIR / "examples" / "demo.yaml", PROJECT_DIR / "bench" / "admin" / "resources.yaml")


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
    # The loaded subjects are bench/run hot-path's seeded ones: its scenarios of existing subjects read them.
    args.seeded = args.assignments
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    with bench_prepared(args, CONFIGS) as ready:
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
        results = {
            "setup": {
                **ready.setup("admin", argv),
                "cpus": os.cpu_count(),
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
        return 1 if bench.requests_failed(runs) else 0


# The results: printed tables, and bench/results/<name>.md and .json.

SQL_CHARACTERS = 1500


def load_table(load: dict[str, Any]) -> Table:
    header = ["data", "rows", "seconds", "rows/s"]
    rows = [
        [f"assignments of {item['experiment']}", f"{item['assignments']:,}", f"{item['seconds']:,.1f}", _rate(item)]
        for item in load["experiments"]
    ]
    rows.append(["identifier links", f"{load['links']:,}", f"{load['links_seconds']:,.1f}", ""])
    rows.append(["VACUUM ANALYZE (whole database)", "", f"{load['vacuum_analyze_seconds']:,.1f}", ""])
    return header, rows


def _rate(item: dict[str, Any]) -> str:
    return f"{item['assignments'] / item['seconds']:,.0f}" if item["seconds"] else "n/a"


def pages_table(pages: list[dict[str, Any]]) -> Table:
    header = [
        "page",
        "path",
        "status",
        "cold ms",
        "median ms",
        "queries",
        "cold SQL ms",
        "median SQL ms",
        f"under {TARGET_MS} ms",
    ]
    rows = []
    for page in pages:
        if page["status"] != 200:
            status = f"{page['status']} {page['error'] or ''}".strip()
            rows.append([page["title"], f"`{page['path']}`", status, number(page["cold_ms"]), "", "", "", "", "n/a"])
            continue
        first, *warm = page["queries"]
        queries = str(warm[-1]) if first == warm[-1] else f"{warm[-1]} (first: {first})"
        rows.append(
            [
                page["title"] + ("" if page["shows_expected"] else " (not the expected content)"),
                f"`{page['path']}`",
                str(page["status"]) + (f" ({page['failed_runs']} later failed)" if page["failed_runs"] else ""),
                number(page["cold_ms"]),
                number(page["median_ms"]),
                queries,
                number(page["cold_sql_ms"]),
                number(page["sql_median_ms"]),
                yes(page["median_ms"] < TARGET_MS and page["cold_ms"] < TARGET_MS),
            ]
        )
    return header, rows


def _plans(pages: list[dict[str, Any]]) -> list[str]:
    lines = []
    for page in pages:
        if not page.get("explained"):
            continue
        lines += [f"### {page['title']} (`{page['path']}`)", ""]
        for query in page["explained"]:
            sql = query["sql"]
            if len(sql) > SQL_CHARACTERS:
                sql = sql[:SQL_CHARACTERS] + " ..."
            slowest = ", the slowest of the page" if query["slowest"] else ""
            lines += [f"{query['ms']:,.1f} ms in the page{slowest}:", "", "```sql", sql, "```", ""]
            lines += ["```", query["plan"], "```", ""]
    return lines


def results_markdown(results: dict[str, Any]) -> str:
    setup, load = results["setup"], results["load"]
    mebibytes = 1024 * 1024
    lines = [
        *results_heading("Staff console benchmark", setup["started_at"], setup["command"]),
        f"Machine: {setup['cpus']} CPUs, PostgreSQL {setup['postgresql']}, Python {setup['python']}, "
        f"Django {setup['django']}, commit {setup['commit']}.",
        "",
        "## Data",
        "",
        f"Loaded in {load['insert_seconds'] + load['links_seconds']:,.0f} s with the count triggers on, then "
        f"VACUUM ANALYZE. assignments_assignment: {load['table_bytes'] / mebibytes:,.0f} MiB of rows, "
        f"{load['index_bytes'] / mebibytes:,.0f} MiB of indexes; assignments_assignmentcount: "
        f"{load['count_rows']:,} rows, {'equal to' if load['counts_exact'] else '**not equal** to'} "
        "the assignments per experiment.",
        "",
        as_markdown(load_table(load)),
        "",
        *markdown_section(
            f"## Pages (superuser, in-process test client, {setup['page_runs']} warm runs after the first)",
            pages_table(results["pages"]),
        ),
    ]
    if results["runs"]:
        lines += [
            *markdown_section(
                "## Hot path with and without the count triggers (medians of the rounds)",
                count_triggers_table(results["runs"]),
            ),
            *markdown_section("### Raw SQL and service", main_table(results["runs"])),
            *markdown_section("### Every run", runs_table(results["runs"])),
        ]
    lines += [
        "## Plans: EXPLAIN (ANALYZE, BUFFERS) of each page's slowest read and of its reads of the big tables",
        "",
        "Run once more after the page's last request; times in the page are those of that request.",
        "",
        *_plans(results["pages"]),
    ]
    return "\n".join(lines)


def admin_results_write(*, directory: Path, name: str, results: dict[str, Any]) -> tuple[Path, Path]:
    return results_files_write(directory=directory, name=name, data=results, markdown=results_markdown(results))
