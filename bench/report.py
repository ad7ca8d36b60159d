"""Tables of a benchmark run: printed aligned, written as markdown and JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from bench.server import PROJECT_DIR

Table = tuple[list[str], list[list[str]]]


def _number(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "n/a"
    return f"{numerator / denominator:.2f}x"


def runs_table(runs: list[dict[str, Any]]) -> Table:
    header = [
        "scenario",
        "round",
        "target",
        "req/s",
        "subjects/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "errors",
        "tx/req",
        "cpu ms/req app",
        "db",
        "client",
        "busy cores",
        "other cores",
    ]
    rows = []
    for run in runs:
        cpu = run["cpu_ms_per_request"]
        rows.append(
            [
                f"{run['scenario']} {run['title']}",
                str(run["round"]),
                run["label"],
                _number(run["requests_per_second"]),
                _number(run["subjects_per_second"], 0),
                _number(run["p50_ms"], 2),
                _number(run["p95_ms"], 2),
                _number(run["p99_ms"], 2),
                str(run["errors"]),
                _number(run["transactions_per_request"], 2),
                _number(cpu["app"], 2),
                _number(cpu["db"], 2),
                _number(cpu["client"], 2),
                _number(run["machine_busy_cores"], 2),
                _number(run["other_cores"], 2),
            ]
        )
    return header, rows


_MEDIAN_KEYS = (
    "requests_per_second",
    "subjects_per_second",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "transactions_per_request",
    "machine_busy_cores",
    "other_cores",
)


def _median(values: list[float | None]) -> float | None:
    known = sorted(value for value in values if value is not None)
    if not known:
        return None
    middle = len(known) // 2
    return known[middle] if len(known) % 2 else (known[middle - 1] + known[middle]) / 2


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per scenario and target: the median of each measure over its rounds."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["label"]), []).append(run)
    summary = []
    for group in groups.values():
        record = {**group[0], "rounds": len(group), "errors": sum(run["errors"] for run in group)}
        for key in _MEDIAN_KEYS:
            record[key] = _median([run[key] for run in group])
        record["cpu_ms_per_request"] = {
            part: _median([run["cpu_ms_per_request"][part] for run in group]) for part in ("app", "db", "client")
        }
        summary.append(record)
    return summary


def _server_cpu_ms(run: dict[str, Any]) -> float | None:
    """CPU per request of the code answering it and of PostgreSQL; for the baseline its client is that code."""
    cpu = run["cpu_ms_per_request"]
    app = cpu["client"] if run["target"] == "baseline" else cpu["app"]
    return None if app is None or cpu["db"] is None else app + cpu["db"]


def comparison_table(runs: list[dict[str, Any]]) -> Table:
    """Each service beside the baseline of the same scenario (medians over rounds).

    `slower` is baseline throughput over service throughput, service p50 over
    baseline p50, and service CPU per request (gunicorn workers + PostgreSQL)
    over baseline CPU per request (its client + PostgreSQL): how many times the
    floor the service costs. On a saturated machine the CPU ratio is the
    steadiest of the three.
    """
    header = [
        "scenario",
        "service",
        "count triggers",
        "req/s service",
        "req/s baseline",
        "slower (req/s)",
        "p50 ms service",
        "p50 ms baseline",
        "slower (p50)",
        "p99 ms service",
        "p99 ms baseline",
        "cpu ms/req service",
        "cpu ms/req baseline",
        "slower (cpu)",
    ]
    summary = medians(runs)
    # Each service run is compared with the baseline that ran with the count triggers in the same state.
    baselines = {(run["scenario"], run["count_triggers"]): run for run in summary if run["target"] == "baseline"}
    rows = []
    for run in summary:
        base = baselines.get((run["scenario"], run["count_triggers"]))
        if run["target"] != "service" or base is None:
            continue
        rows.append(
            [
                f"{run['scenario']} {run['title']}",
                run["connections"],
                run["count_triggers"],
                _number(run["requests_per_second"]),
                _number(base["requests_per_second"]),
                _ratio(base["requests_per_second"], run["requests_per_second"]),
                _number(run["p50_ms"], 2),
                _number(base["p50_ms"], 2),
                _ratio(run["p50_ms"], base["p50_ms"]),
                _number(run["p99_ms"], 2),
                _number(base["p99_ms"], 2),
                _number(_server_cpu_ms(run), 2),
                _number(_server_cpu_ms(base), 2),
                _ratio(_server_cpu_ms(run), _server_cpu_ms(base)),
            ]
        )
    return header, rows


def git_commit() -> str:
    """The checked-out commit, marked when tracked files have changes: what a result was measured on."""
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


def count_triggers_table(runs: list[dict[str, Any]]) -> Table:
    """Each target with the count triggers on beside the same target with them off (medians over rounds).

    db cpu is PostgreSQL's CPU per request, where the triggers run: the steadiest measure of their cost.
    """
    header = [
        "scenario",
        "target",
        "req/s on",
        "req/s off",
        "off / on (req/s)",
        "p50 ms on",
        "p50 ms off",
        "db cpu ms/req on",
        "db cpu ms/req off",
        "on - off (db cpu ms)",
    ]
    summary = medians(runs)
    off = {
        (run["scenario"], run["target"], run["connections"]): run for run in summary if run["count_triggers"] == "off"
    }
    rows = []
    for on in summary:
        other = off.get((on["scenario"], on["target"], on["connections"]))
        if on["count_triggers"] != "on" or other is None:
            continue
        db_on, db_off = on["cpu_ms_per_request"]["db"], other["cpu_ms_per_request"]["db"]
        rows.append(
            [
                f"{on['scenario']} {on['title']}",
                on["label"],
                _number(on["requests_per_second"]),
                _number(other["requests_per_second"]),
                _ratio(other["requests_per_second"], on["requests_per_second"]),
                _number(on["p50_ms"], 2),
                _number(other["p50_ms"], 2),
                _number(db_on, 2),
                _number(db_off, 2),
                "n/a" if db_on is None or db_off is None else f"{db_on - db_off:+.2f}",
            ]
        )
    return header, rows


def statements_table(counts: list[dict[str, Any]]) -> Table:
    header = ["scenario", "subjects/request", "statements/request", "statements"]
    rows = [
        [count["scenario"], str(count["subjects"]), str(count["statements"]), "; ".join(count["sql"])]
        for count in counts
    ]
    return header, rows


def as_text(table: Table) -> str:
    header, rows = table
    widths = [max(len(line[column]) for line in [header, *rows]) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def as_markdown(table: Table) -> str:
    header, rows = table
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def _workers(setup: dict[str, Any]) -> str:
    threads = setup.get("gunicorn_threads", 1)
    if threads > 1:
        return f"{setup['gunicorn_workers']} gthread workers of {threads} threads"
    return f"{setup['gunicorn_workers']} sync workers"


def _count_triggers_section(runs: list[dict[str, Any]]) -> list[str]:
    table = count_triggers_table(runs)
    if not table[1]:
        return []
    return ["## Count triggers on and off", "", as_markdown(table), ""]


def results_write(*, directory: Path, name: str, results: dict[str, Any]) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{name}.json"
    markdown_path = directory / f"{name}.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    setup = results["setup"]
    markdown = [
        f"# Assignment hot path benchmark: {setup['started_at']}",
        "",
        f"Command: `{setup['command']}`",
        "",
        f"Machine: {setup['cpus']} CPUs, PostgreSQL {setup['postgresql']}, Python {setup['python']}, "
        f"Django {setup['django']}, commit {setup['commit']}. gunicorn {_workers(setup)}, "
        f"concurrency {setup['concurrency']}, {setup['warmup']} s warm-up and {setup['duration']} s measured per run, "
        f"{setup['repeat']} round(s) per scenario (the comparison shows medians).",
        "",
        "## Service vs raw-SQL baseline",
        "",
        as_markdown(comparison_table(results["runs"])),
        "",
        *_count_triggers_section(results["runs"]),
        "## Every run",
        "",
        as_markdown(runs_table(results["runs"])),
        "",
        "## SQL statements per request (in-process, Django's CaptureQueriesContext)",
        "",
        as_markdown(statements_table(results["statements"])),
        "",
    ]
    markdown_path.write_text("\n".join(markdown))
    return json_path, markdown_path
