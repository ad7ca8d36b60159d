"""The comparison bench/run citus writes: two hot-path results, plain PostgreSQL and Citus, in one table.

bench/results/citus.md, and citus.json (both results, whole). The two layouts ran
one after the other, not alternating within a round as bench/run's targets do:
a disturbance of the shared machine during one of them shows in its rounds and
in its `other cores`, not in the other layout's.
"""

from __future__ import annotations

from typing import Any

from bench.report import Table, as_markdown, medians, runs_table

LAYOUTS = ("postgresql", "citus")
LAYOUT_NAMES = {"postgresql": "PostgreSQL", "citus": "Citus"}
TARGET_NAMES = {"baseline": "raw SQL", "minimal": "minimal app", "service": "service"}


def _number(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _throughput(run: dict[str, Any]) -> float:
    return run["subjects_per_second"] if run["per_subject"] else run["requests_per_second"]


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
            ratio = "" if layout == "postgresql" or plain is None else f"{_throughput(run) / _throughput(plain):.2f}"
            cpu = run["cpu_ms_per_request"]
            rows.append(
                [
                    scenario,
                    str(clients),
                    "subjects/s" if run["per_subject"] else "req/s",
                    TARGET_NAMES.get(run["target"], run["target"]) + run["label"].removeprefix(run["target"]),
                    LAYOUT_NAMES[layout],
                    _number(_throughput(run)),
                    ratio,
                    _number(run["p50_ms"], 1),
                    _number(run["p99_ms"], 1),
                    _number(cpu["app"], 2),
                    _number(cpu["db"], 2),
                    _number(run["transactions_per_request"], 2),
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


def _yes(value: bool) -> str:
    return "yes" if value else "**no**"


def _setup_line(layout: str, results: dict[str, Any]) -> str:
    setup = results["setup"]
    seed, end = setup["seed"], setup["end"]
    return (
        f"- {LAYOUT_NAMES[layout]}: {setup['layout']} (PostgreSQL {setup['postgresql']}); `{setup['command']}`, "
        f"started {setup['started_at']}, commit {setup['commit']}; {seed['assignments']:,} assignments at the start, "
        f"{end['assignments']:,} at the end; counts exact at the start {_yes(seed['counts_exact'])}, at the end "
        f"{_yes(end['counts_exact'])}"
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
        f"# Plain PostgreSQL and Citus on one machine: {plain['started_at']}",
        "",
        f"Command: `{command}`",
        "",
        f"- Machine: {machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB RAM; "
        f"{machine['os']}. **Everything shares these cores**: the load clients, gunicorn, the plain PostgreSQL "
        "server and, in the Citus runs, the cluster's three PostgreSQL instances (a coordinator and 2 workers "
        "on loopback). This measures what the coordinator adds on one machine, not what more machines give.",
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
        "## SQL statements per request (the service, in-process)",
        "",
        as_markdown(statements_table(results)),
        "",
    ]
    for layout in LAYOUTS:
        lines += [f"## Every run: {LAYOUT_NAMES[layout]}", "", as_markdown(runs_table(results[layout]["runs"])), ""]
    return "\n".join(lines)
