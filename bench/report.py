"""Tables of a benchmark run: printed aligned, written as markdown and JSON."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.connections import DEPLOYMENT
from devtools import PROJECT_DIR

Table = tuple[list[str], list[list[str]]]
# A run's cpu_ms_per_request: its target's processes (none for raw SQL), the PostgreSQL backends, the load workers.
CPU_PARTS = ("app", "db", "client")


def number(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def yes(value: bool) -> str:
    return "yes" if value else "**no**"


def on_and_off(heading: str) -> list[str]:
    """A measure's two column headings: with the state on, then off."""
    return [f"{heading} on", f"{heading} off"]


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "n/a"
    return f"{numerator / denominator:.2f}"


def runs_table(runs: list[dict[str, Any]]) -> Table:
    header = [
        "scenario",
        "clients",
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
                run["scenario"],
                str(run["concurrency"]),
                str(run["round"]),
                run["label"],
                number(run["requests_per_second"]),
                number(run["subjects_per_second"], 0),
                number(run["p50_ms"], 2),
                number(run["p95_ms"], 2),
                number(run["p99_ms"], 2),
                str(run["errors"]),
                number(run["transactions_per_request"], 2),
                *(number(cpu[part], 2) for part in CPU_PARTS),
                number(run["machine_busy_cores"], 2),
                number(run["other_cores"], 2),
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
    # Set by bench/run hot-path for the scenarios of its gates table only.
    "stored_share",
)


def _median(values: list[float | None]) -> float | None:
    known = sorted(value for value in values if value is not None)
    if not known:
        return None
    middle = len(known) // 2
    return known[middle] if len(known) % 2 else (known[middle - 1] + known[middle]) / 2


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per scenario, concurrency and target: the median of each measure over its rounds."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["concurrency"], run["label"]), []).append(run)
    summary = []
    for group in groups.values():
        record = {**group[0], "rounds": len(group), "errors": sum(run["errors"] for run in group)}
        for key in _MEDIAN_KEYS:
            record[key] = _median([run.get(key) for run in group])
        record["cpu_ms_per_request"] = {
            part: _median([run["cpu_ms_per_request"][part] for run in group]) for part in CPU_PARTS
        }
        summary.append(record)
    return summary


def throughput(run: dict[str, Any] | None) -> float | None:
    """Subjects per second for the scenarios of many subjects per request, requests per second otherwise."""
    if run is None:
        return None
    return run["subjects_per_second"] if run["per_subject"] else run["requests_per_second"]


def unit(run: dict[str, Any]) -> str:
    """What throughput counts for the run."""
    return "subjects/s" if run["per_subject"] else "req/s"


def per_round_ratio(runs: Iterable[dict[str, Any]], references: Iterable[dict[str, Any]]) -> float | None:
    """The median over rounds of each run's throughput divided by its reference's in the same round.

    The two ran one after the other within a round, so a disturbance of the shared
    machine that lasts a round hits both; medians taken separately could come
    from different rounds.
    """
    by_round = {reference["round"]: throughput(reference) for reference in references}
    return _median([throughput(run) / by_round[run["round"]] for run in runs if by_round.get(run["round"])])


def _service_ratio(runs: list[dict[str, Any]], service: dict[str, Any] | None) -> str:
    """The service's throughput over the minimal app's of the same scenario, concurrency and trigger state."""
    if service is None:
        return "n/a"
    key = (service["scenario"], service["concurrency"], service["count_triggers"])
    ratio = per_round_ratio(
        (run for run in runs if run["label"] == service["label"] and (run["scenario"], run["concurrency"]) == key[:2]),
        (
            run
            for run in runs
            if run["target"] == "minimal" and (run["scenario"], run["concurrency"], run["count_triggers"]) == key
        ),
    )
    return "n/a" if ratio is None else f"{ratio:.2f}"


def is_minimal(target: str) -> bool:
    """The minimal app on one of its servers: minimal, minimal-sync, minimal-gthread, minimal-asgi, ..."""
    return target == "minimal" or target.startswith("minimal-")


def is_service(target: str) -> bool:
    """The service, or a variant of it run beside it (service-<name>: other gunicorn options, another revision)."""
    return target == "service" or target.startswith("service-")


def _fastest_minimal(group: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Of the medians of one scenario, concurrency and trigger state, the minimal target of the most throughput."""
    minimal = [run for run in group if is_minimal(run["target"]) and throughput(run)]
    return max(minimal, key=throughput, default=None)


def _same_place(run: dict[str, Any], other: dict[str, Any]) -> bool:
    return (run["scenario"], run["concurrency"], run["count_triggers"]) == (
        other["scenario"],
        other["concurrency"],
        other["count_triggers"],
    )


def _ratio_to(runs: list[dict[str, Any]], run: dict[str, Any], reference: dict[str, Any]) -> float | None:
    """per_round_ratio of the runs of one median record to those of another, of the same place."""
    return per_round_ratio(
        (each for each in runs if each["label"] == run["label"] and _same_place(each, run)),
        (each for each in runs if each["label"] == reference["label"] and _same_place(each, reference)),
    )


def _places(runs: list[dict[str, Any]]) -> dict[tuple[str, int, str], list[dict[str, Any]]]:
    """The medians over rounds, by scenario, concurrency and trigger state."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for run in medians(runs):
        groups.setdefault((run["scenario"], run["concurrency"], run["count_triggers"]), []).append(run)
    return groups


def _scenario_name(scenario: str, count_triggers: str) -> str:
    return scenario if count_triggers == "on" else f"{scenario} (count triggers off)"


def fastest_minimal_table(runs: list[dict[str, Any]]) -> Table:
    """Per scenario and concurrency, each service target beside the fastest minimal app on any server (medians
    over rounds), and the median over rounds of the service's throughput ÷ that minimal target's in the same
    round: the comparison an outside check makes with the fastest minimal app it can build.

    cpu ms per request: app = the target's server processes (gunicorn's or uvicorn's workers), db = the
    PostgreSQL backends. A row for each service target: service, its --connections variations and its
    --service-variant and --service-at targets.
    """
    header = [
        "scenario",
        "clients",
        "unit",
        "fastest minimal",
        "its throughput",
        "its cpu ms/req app",
        "db",
        "service target",
        "throughput",
        "service ÷ fastest minimal (per round, median)",
        "cpu ms/req app",
        "db",
        "service p99 ms",
    ]
    rows = []
    for (scenario, concurrency, count_triggers), group in _places(runs).items():
        fastest = _fastest_minimal(group)
        if fastest is None:
            continue
        for service in [run for run in group if is_service(run["target"])] or [None]:
            ratio = None if service is None else _ratio_to(runs, service, fastest)
            cpu = (service or {}).get("cpu_ms_per_request", {})
            rows.append(
                [
                    _scenario_name(scenario, count_triggers),
                    str(concurrency),
                    unit(fastest),
                    fastest["label"],
                    number(throughput(fastest), 0),
                    number(fastest["cpu_ms_per_request"]["app"], 2),
                    number(fastest["cpu_ms_per_request"]["db"], 2),
                    "n/a" if service is None else service["label"],
                    number(throughput(service), 0),
                    "n/a" if ratio is None else f"{ratio:.2f}",
                    number(cpu.get("app"), 2),
                    number(cpu.get("db"), 2),
                    number(service and service["p99_ms"], 2),
                ]
            )
    return header, rows


def targets_table(runs: list[dict[str, Any]]) -> Table:
    """Every target of every scenario and concurrency (medians over rounds), the fastest minimal app marked, and
    each target's throughput ÷ the fastest minimal app's (median over rounds of the ratio within a round)."""
    header = [
        "scenario",
        "clients",
        "target",
        "unit",
        "throughput",
        "÷ fastest minimal",
        "p50 ms",
        "p99 ms",
        "cpu ms/req app",
        "db",
        "client",
        "errors",
    ]
    rows = []
    for (scenario, concurrency, count_triggers), group in _places(runs).items():
        fastest = _fastest_minimal(group)
        for run in group:
            ratio = None if fastest is None or run["target"] == "baseline" else _ratio_to(runs, run, fastest)
            rows.append(
                [
                    _scenario_name(scenario, count_triggers),
                    str(concurrency),
                    run["label"] + (" (fastest minimal)" if run is fastest else ""),
                    unit(run),
                    number(throughput(run), 0),
                    "n/a" if ratio is None else f"{ratio:.2f}",
                    number(run["p50_ms"], 2),
                    number(run["p99_ms"], 2),
                    *(number(run["cpu_ms_per_request"][part], 2) for part in CPU_PARTS),
                    str(run["errors"]),
                ]
            )
    return header, rows


def commands_table(runs: list[dict[str, Any]]) -> Table:
    """Each HTTP target's start command ($PORT: a free port per run), as its first run had it."""
    commands: dict[str, str] = {}
    for run in runs:
        if run.get("command"):
            commands.setdefault(run["label"], run["command"])
    return ["target", "command"], [[label, f"`{command}`"] for label, command in commands.items()]


def main_table(runs: list[dict[str, Any]]) -> Table:
    """Per scenario and concurrency, the three targets side by side (medians over rounds).

    Throughput is subjects per second for the 1000-subject scenarios, requests
    per second otherwise; raw SQL has no /healthz. Latency and CPU are the
    service's: app is its gunicorn workers, db the PostgreSQL backends, per
    request. Errors add up every run of the row's targets. A service variation
    (--connections, --service-variant, --service-at) or count trigger state other
    than the default gets a row of its own, beside the raw SQL and minimal app runs
    of the same trigger state. The minimal app is the `minimal` target, under the
    service's own gunicorn command: fastest_minimal_table compares with the others.
    """
    header = [
        "scenario",
        "clients",
        "unit",
        "raw SQL",
        "minimal app",
        "service",
        "service ÷ minimal (per round, median)",
        "service p50 ms",
        "service p99 ms",
        "service cpu ms/req app",
        "db",
        "errors",
    ]
    groups: dict[tuple[str, int, str], dict[str, list[dict[str, Any]]]] = {}
    for run in medians(runs):
        group = groups.setdefault((run["scenario"], run["concurrency"], run["count_triggers"]), {})
        group.setdefault(run["target"], []).append(run)
    rows = []
    for (scenario, concurrency, count_triggers), targets in groups.items():
        (baseline,) = targets.get("baseline", [None])
        (minimal,) = targets.get("minimal", [None])
        services = [run for target, found in targets.items() if is_service(target) for run in found]
        for service in services or [None]:
            any_run = next((run for run in (service, minimal, baseline) if run is not None), None)
            if any_run is None:
                continue
            if service is None or (service["target"] == "service" and service["connections"] == DEPLOYMENT):
                variant = []
            elif service["target"] == "service":
                variant = [service["connections"]]
            else:
                variant = [service["label"]]
            variant += [] if count_triggers == "on" else ["count triggers off"]
            name = f"{scenario} ({', '.join(variant)})" if variant else scenario
            cpu = (service or {}).get("cpu_ms_per_request", {})
            rows.append(
                [
                    name,
                    str(concurrency),
                    unit(any_run),
                    *(number(throughput(run), 0) for run in (baseline, minimal, service)),
                    _service_ratio(runs, service),
                    number(service and service["p50_ms"], 2),
                    number(service and service["p99_ms"], 2),
                    number(cpu.get("app"), 2),
                    number(cpu.get("db"), 2),
                    str(sum(run["errors"] for run in (baseline, minimal, service) if run is not None)),
                ]
            )
    return header, rows


def gates_table(runs: list[dict[str, Any]]) -> Table:
    """Each gated scenario beside its reference, the same request to an experiment without gates, per target
    (medians over rounds), and the median over rounds of the ratio of the two within each round.

    The rounds take the scenarios in turn (bench/rounds.py), so the two runs of a ratio
    ran in the same round, minutes apart at most. stored ÷ sent: the rows a run stored
    over the subjects it asked for, which the gates make less than 1 when they keep some
    out and the holdouts' membership rows more. CPU is per request: app the target's
    gunicorn workers (none for raw SQL), db the PostgreSQL backends, client the load
    workers, which build the attributes and check the exclusions (bench/exclusions.py)
    on the same cores.
    """
    header = [
        "scenario",
        "without gates",
        "clients",
        "target",
        "unit",
        "throughput without",
        "with",
        "with ÷ without (per round, median)",
        "stored ÷ sent without",
        "with",
        "p50 ms without",
        "with",
        "cpu ms/req app without",
        "with",
        "db without",
        "with",
        "client without",
        "with",
    ]

    def place(run: dict[str, Any]) -> tuple:
        return run["concurrency"], run["label"], run["count_triggers"]

    summary = {(run["scenario"], *place(run)): run for run in medians(runs)}
    rows = []
    for gated in summary.values():
        reference = summary.get((gated.get("reference"), *place(gated)))
        if reference is None:
            continue
        ratio = per_round_ratio(
            (run for run in runs if (run["scenario"], *place(run)) == (gated["scenario"], *place(gated))),
            (run for run in runs if (run["scenario"], *place(run)) == (reference["scenario"], *place(gated))),
        )
        both = (reference, gated)
        rows.append(
            [
                gated["scenario"],
                reference["scenario"],
                str(gated["concurrency"]),
                gated["label"],
                unit(gated),
                *(number(throughput(run), 0) for run in both),
                "n/a" if ratio is None else f"{ratio:.2f}",
                *(number(run["stored_share"], 2) for run in both),
                *(number(run["p50_ms"], 2) for run in both),
                *(number(run["cpu_ms_per_request"][part], 2) for part in CPU_PARTS for run in both),
            ]
        )
    return header, rows


def command_recorded(words: Iterable[str]) -> str:
    """A benchmark's command line as its results record it: without --results-dir, where this machine put
    them (a file in bench/results names itself)."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--results-dir":
            skip = True
        elif not word.startswith("--results-dir="):
            kept.append(str(word))
    return " ".join(kept)


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
        "clients",
        "target",
        *on_and_off("req/s"),
        "off / on (req/s)",
        *on_and_off("p50 ms"),
        *on_and_off("db cpu ms/req"),
        "on - off (db cpu ms)",
    ]
    summary = medians(runs)

    def key(run: dict[str, Any]) -> tuple:
        return run["scenario"], run["concurrency"], run["target"], run["connections"]

    off = {key(run): run for run in summary if run["count_triggers"] == "off"}
    rows = []
    for on in summary:
        other = off.get(key(on))
        if on["count_triggers"] != "on" or other is None:
            continue
        db_on, db_off = on["cpu_ms_per_request"]["db"], other["cpu_ms_per_request"]["db"]
        rows.append(
            [
                on["scenario"],
                str(on["concurrency"]),
                on["label"],
                *(number(run["requests_per_second"]) for run in (on, other)),
                _ratio(other["requests_per_second"], on["requests_per_second"]),
                *(number(run["p50_ms"], 2) for run in (on, other)),
                number(db_on, 2),
                number(db_off, 2),
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


def gunicorn_used(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each distinct gunicorn setting the HTTP runs had, with the targets that had it: one, unless
    deploy/gunicorn.conf.py changed during the benchmark."""
    used: list[dict[str, Any]] = []
    for run in runs:
        if run["gunicorn"] is None:
            continue
        entry = next((entry for entry in used if entry["settings"] == run["gunicorn"]), None)
        if entry is None:
            used.append(entry := {"settings": run["gunicorn"], "targets": []})
        if run["label"] not in entry["targets"]:
            entry["targets"].append(run["label"])
    return used


def _gunicorn_text(entry: dict[str, Any]) -> str:
    settings = entry["settings"]
    parser = f", HTTP parser {settings['http_parser']}" if settings.get("http_parser") else ""
    return (
        f"{settings['worker_class']}, {settings['workers']} workers x {settings['threads']} threads, "
        f"keepalive {settings['keepalive']} s, max_requests {settings['max_requests']}, "
        f"preload {'on' if settings['preload_app'] else 'off'}, "
        f"access log {'on' if settings['access_log'] else 'off'}{parser} ({', '.join(entry['targets'])})"
    )


def results_heading(title: str, started_at: str, command: str) -> list[str]:
    """The first lines of every benchmark's markdown: what ran, when, and the command that ran it."""
    return [f"# {title}: {started_at}", "", f"Command: `{command}`", ""]


def markdown_section(heading: str, table: Table) -> list[str]:
    return [heading, "", as_markdown(table), ""]


def _section_if_rows(heading: str, table: Table) -> list[str]:
    """The section, or nothing where the runs had no row for its table (such as no gated scenario)."""
    return markdown_section(heading, table) if table[1] else []


def _links_lines(links: dict[str, Any] | None) -> list[str]:
    """The followLinks scenarios' data (bench/links.py), and what they stored by source."""
    if not links:
        return []
    stored = "; ".join(
        f"{row['experiment']} {'pool' if row['pool'] else 'unlinked'} cookies {row['source']}: {row['assignments']:,}"
        for row in links["outcome"]["counts"]
    )
    as_expected = yes(links["outcome"]["as_expected"])
    return [
        f"- identifier links: {links['links']:,} at the start ({links['linked_users']:,} seeded users, each linked to "
        f"two cookies, one in ten shared with the next user; the first cookie of each assigned in banner-copy and "
        f"banner-copy-nolinks: {links['assigned_cookies']:,} in each); {links['pool_stored']:,} linked new cookies "
        f"stored ahead of the runs, {links['pool_taken']:,} asked for. New cookies stored: {stored or 'none'}; "
        f"as expected (pool cookies `linked` in banner-copy, every other `hashed`) {as_expected}.",
    ]


def _stored_lines(stored: dict[str, Any] | None) -> list[str]:
    """The seeded subjects also stored in more experiments (bench/seed.py's stored_seed)."""
    if not stored:
        return []
    return [
        f"- the first {stored['count']:,} seeded subjects also stored in {len(stored['experiments'])} more "
        f"experiments ({stored['copied']:,} rows by COPY in {stored['seconds']:.0f} s), which the scenarios of "
        f"one stored user in many experiments draw from: {', '.join(stored['experiments'])}.",
    ]


def results_markdown(results: dict[str, Any]) -> str:
    setup = results["setup"]
    machine = setup["machine"]
    seed, end = setup["seed"], setup["end"]
    gunicorn_lines = [f"- gunicorn {setup['gunicorn_version']}: {_gunicorn_text(entry)}" for entry in setup["gunicorn"]]
    lines = [
        *results_heading("Assignment hot path benchmark", setup["started_at"], setup["command"]),
        "## Machine",
        "",
        f"- CPU: {machine_text(machine)}",
        f"- OS: {machine['os']}",
        f"- PostgreSQL {setup['postgresql']}, Python {setup['python']}, Django {setup['django']}",
        f"- database layout: {setup['layout']}",
        *gunicorn_lines,
        f"- commit {setup['commit']}",
        "",
        "## Setup",
        "",
        "- The service: `gunicorn -c deploy/gunicorn.conf.py` (the application its file names, config.settings, "
        "DEBUG=false); "
        "the minimal app (bench/minimal_app.py, bench/minimal_asgi.py) under the same command (`minimal`) and on "
        "other servers; every target's start command is under Targets. Output to var/bench-gunicorn.log; "
        "clients on the same machine, each client keeping its connection open where the server lets it.",
        f"- assignments_assignment: {seed['assignments']:,} rows at the start ({seed['copied']:,} seeded by COPY "
        f"in {seed['seconds']:.0f} s), {end['assignments']:,} at the end; reads draw from {seed['seeded']:,} "
        f"seeded subjects; assignment counts exact at the start {yes(seed['counts_exact'])}, at the end "
        f"{yes(end['counts_exact'])}.",
        *_stored_lines(seed.get("stored")),
        *_links_lines(setup.get("links")),
        f"- {', '.join(map(str, setup['concurrency']))} concurrent clients; {setup['warmup']} s warm-up and "
        f"{setup['duration']} s measured per run; {setup['repeat']} round(s), the targets in turn within each, "
        "their order turned by one each round; tables other than the last show each target's median.",
        "",
        *markdown_section("## Raw SQL, minimal app and service", main_table(results["runs"])),
        *_section_if_rows(
            "## The service and the fastest minimal app (on any server)", fastest_minimal_table(results["runs"])
        ),
        *_section_if_rows("## Every target (medians over rounds)", targets_table(results["runs"])),
        *_section_if_rows(
            "## Targets: start commands\n\nEach in the deployment's environment (DATABASE_URL of the bench database, "
            "SECRET_KEY, DEBUG=false, ALLOWED_HOSTS, DJANGO_SETTINGS_MODULE=config.settings) with the variables "
            "shown; $TOKEN is the run's proxy token, $PORT a free port, $WORKTREE the git worktree named, "
            "$CHECKOUT the checkout.",
            commands_table(results["runs"]),
        ),
        *_section_if_rows(
            "## With gates and without (each gated scenario beside the same request to an experiment without gates)",
            gates_table(results["runs"]),
        ),
        *_section_if_rows("## Count triggers on and off", count_triggers_table(results["runs"])),
        *markdown_section(
            "## Every run (cpu ms per request: app = gunicorn workers, db = PostgreSQL backends)",
            runs_table(results["runs"]),
        ),
        *_section_if_rows(
            "## SQL statements per request (in-process, Django's CaptureQueriesContext; /healthz's own connection "
            "is not seen)",
            statements_table(results["statements"]),
        ),
    ]
    return "\n".join(lines)


def results_files_write(*, directory: Path, name: str, data: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """Every benchmark's results: `<name>.json` with the data, `<name>.md` with its tables; returns both paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{name}.json"
    markdown_path = directory / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    markdown_path.write_text(markdown)
    return json_path, markdown_path


def results_write(*, directory: Path, name: str, results: dict[str, Any]) -> tuple[Path, Path]:
    return results_files_write(directory=directory, name=name, data=results, markdown=results_markdown(results))


# The machine a benchmark ran on, as Linux describes it: numbers mean little without it.


def _proc_value(path: str, key: str) -> str | None:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def _os_name() -> str:
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return platform.system()
    names = dict(line.split("=", 1) for line in lines if "=" in line)
    return names.get("PRETTY_NAME", platform.system()).strip('"')


def machine() -> dict[str, str | int | None]:
    memory_kib = _proc_value("/proc/meminfo", "MemTotal")
    return {
        "cpu_model": _proc_value("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory_gib": None if memory_kib is None else round(int(memory_kib.split()[0]) / 1024**2, 1),
        "os": f"{_os_name()}, Linux {platform.release()}",
    }


def machine_text(machine: dict[str, Any]) -> str:
    return f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB RAM"
