"""bench/run admin's results: printed tables, and bench/results/<name>.md and .json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.admin_pages import TARGET_MS
from bench.report import Table, as_markdown, count_triggers_table, main_table, results_files_write, runs_table

SQL_CHARACTERS = 1500


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


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
            rows.append([page["title"], f"`{page['path']}`", status, _ms(page["cold_ms"]), "", "", "", "", "n/a"])
            continue
        first, *warm = page["queries"]
        queries = str(warm[-1]) if first == warm[-1] else f"{warm[-1]} (first: {first})"
        rows.append(
            [
                page["title"] + ("" if page["shows_expected"] else " (not the expected content)"),
                f"`{page['path']}`",
                str(page["status"]) + (f" ({page['failed_runs']} later failed)" if page["failed_runs"] else ""),
                _ms(page["cold_ms"]),
                _ms(page["median_ms"]),
                queries,
                _ms(page["cold_sql_ms"]),
                _ms(page["sql_median_ms"]),
                "yes" if page["median_ms"] < TARGET_MS and page["cold_ms"] < TARGET_MS else "**no**",
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
        f"# Staff console benchmark: {setup['started_at']}",
        "",
        f"Command: `{setup['command']}`",
        "",
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
        f"## Pages (superuser, in-process test client, {setup['page_runs']} warm runs after the first)",
        "",
        as_markdown(pages_table(results["pages"])),
        "",
    ]
    if results["runs"]:
        lines += [
            "## Hot path with and without the count triggers (medians of the rounds)",
            "",
            as_markdown(count_triggers_table(results["runs"])),
            "",
            "### Raw SQL and service",
            "",
            as_markdown(main_table(results["runs"])),
            "",
            "### Every run",
            "",
            as_markdown(runs_table(results["runs"])),
            "",
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
