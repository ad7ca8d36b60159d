"""bench/run metrics: what the Prometheus metrics cost the hot path, the service with METRICS_ENABLED on and off side
by side in one invocation.

Prepares a database as bench/run hot-path does (examples/demo.yaml, bench/hot_path_resources.yaml,
a proxy token, --seeded assignments), then, per scenario and concurrency, runs
rounds of the service under `gunicorn -c deploy/gunicorn.conf.py` twice: with
metrics on (the default: every request counted and timed, its workers counting into
PROMETHEUS_MULTIPROC_DIR) and with METRICS_ENABLED=false (nothing counted, /metrics
404). The two alternate within a round, and which goes first alternates between
rounds, so a disturbance of the shared machine hits both alike. Each run asks for
subjects of its own. The per-round ratio of the two is the figure to read. Both
write the service's log line per request. Results: bench/results/metrics.md and
.json; bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

from bench.connections import DEPLOYMENT
from bench.hot_path import CONFIGS
from bench.report import (
    Table,
    as_text,
    gunicorn_used,
    markdown_section,
    medians,
    number,
    on_and_off,
    results_files_write,
    results_heading,
    runs_table,
    throughput,
    unit,
)
from bench.rounds import Bench, HelpFormatter, bench_prepared, seeded_check, shared_arguments
from bench.scenarios import SCENARIOS, Scenario

STATES = ("on", "off")
# Scenarios that need no links seeded: the hot path's shapes, from one subject to a thousand, and /healthz.
DEFAULT_SCENARIOS = ["1-new", "1-existing", "100-new", "1000-new", "1000-existing", "healthz", "id-link", "subject-1"]


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run metrics",
        description=__doc__.split("\n\n")[0],
        epilog="A quick look: bench/run metrics --seeded 20000 --duration 3 --warmup 1 --repeat 2 --scenarios 1-new",
        formatter_class=HelpFormatter,
    )
    shared_arguments(parser)
    parser.add_argument(
        "--seeded", type=int, default=1_000_000, help="assignments stored before measuring (the *-existing scenarios)"
    )
    parser.set_defaults(
        database="bench_metrics",
        duration=10.0,
        concurrency=[16],
        scenarios=DEFAULT_SCENARIOS,
        targets=["service"],
        connections=["deployment"],
        count_triggers=["on"],
        repeat=5,
        results_name="metrics",
    )
    args = parser.parse_args(argv)
    seeded_check(parser, args)
    linked = [key for key in args.scenarios if SCENARIOS[key].linked_every]
    if linked:
        parser.error(f"--scenarios: {', '.join(linked)} need identifier links; use bench/run hot-path for them")
    if args.targets != ["service"] or args.connections != ["deployment"] or args.count_triggers != ["on"]:
        parser.error("bench/run metrics measures the service as deployed, with the count triggers on")
    return args


class MetricsBench(Bench):
    """The hot path's rounds (bench/rounds.py), with the service run once with metrics on and once off per round."""

    metrics = "on"

    def _env(self, target: str, connections: str | None) -> dict[str, str]:
        return {**super()._env(target, connections), "METRICS_ENABLED": "true" if self.metrics == "on" else "false"}

    def _prefix(self, scenario: Scenario, label: str, concurrency: int, round_number: int) -> str:
        # Each state's run asks for new subjects of its own.
        return super()._prefix(scenario, f"{label}-metrics-{self.metrics}", concurrency, round_number)

    def _round(self, scenario: Scenario, concurrency: int, round_number: int, state: str) -> Iterator[dict[str, Any]]:
        for metrics in STATES if round_number % 2 else tuple(reversed(STATES)):
            self.metrics = metrics
            run = self.http("service", scenario, concurrency, round_number, state, connections=DEPLOYMENT)
            run["metrics"] = metrics
            run["label"] = "service" if metrics == "on" else "service, metrics off"
            yield run


def _per_round_ratio(runs: list[dict[str, Any]], scenario: str, concurrency: int) -> float | None:
    """The median over rounds of throughput with metrics on divided by throughput with them off, in the same round."""
    by_round: dict[int, dict[str, float]] = {}
    for run in runs:
        if (run["scenario"], run["concurrency"]) == (scenario, concurrency):
            by_round.setdefault(run["round"], {})[run["metrics"]] = throughput(run)
    ratios = [both["on"] / both["off"] for both in by_round.values() if both.get("on") and both.get("off")]
    return statistics.median(ratios) if ratios else None


def metrics_table(runs: list[dict[str, Any]]) -> Table:
    """Per scenario and concurrency, metrics on beside off: medians over rounds, and the per-round ratio."""
    header = [
        "scenario",
        "clients",
        "unit",
        *on_and_off("metrics"),
        "on ÷ off (per round, median)",
        "cost",
        *on_and_off("p50 ms"),
        *on_and_off("p99 ms"),
        *on_and_off("app cpu ms/req"),
        "on - off (app cpu µs/req)",
        "errors",
    ]
    summary = {(run["scenario"], run["concurrency"], run["metrics"]): run for run in medians(runs)}
    rows = []
    for scenario, concurrency in dict.fromkeys((run["scenario"], run["concurrency"]) for run in runs):
        on, off = summary.get((scenario, concurrency, "on")), summary.get((scenario, concurrency, "off"))
        if on is None or off is None:
            continue
        ratio = _per_round_ratio(runs, scenario, concurrency)
        cpu_on, cpu_off = on["cpu_ms_per_request"]["app"], off["cpu_ms_per_request"]["app"]
        rows.append(
            [
                scenario,
                str(concurrency),
                unit(on),
                *(number(throughput(run), 0) for run in (on, off)),
                "n/a" if ratio is None else f"{ratio:.3f}",
                "n/a" if ratio is None else f"{(1 - ratio) * 100:+.1f} %",
                *(number(run["p50_ms"], 2) for run in (on, off)),
                *(number(run["p99_ms"], 2) for run in (on, off)),
                number(cpu_on, 3),
                number(cpu_off, 3),
                "n/a" if cpu_on is None or cpu_off is None else f"{(cpu_on - cpu_off) * 1000:+.0f}",
                str(on["errors"] + off["errors"]),
            ]
        )
    return header, rows


def results_markdown(results: dict[str, Any]) -> str:
    setup = results["setup"]
    gunicorn = "; ".join(
        f"{entry['settings']['worker_class']}, {entry['settings']['workers']} workers x "
        f"{entry['settings']['threads']} threads ({' and '.join(entry['targets'])})"
        for entry in setup["gunicorn"]
    )
    return "\n".join(
        [
            *results_heading("Metrics on and off", setup["started_at"], setup["command"]),
            f"- {setup['cpus']} CPUs; PostgreSQL {setup['postgresql']}, Python {setup['python']}, "
            f"Django {setup['django']}, prometheus-client {setup['prometheus_client']}; commit {setup['commit']}",
            f"- gunicorn -c deploy/gunicorn.conf.py config.wsgi:application: {gunicorn}",
            f"- {setup['seed']['assignments']:,} assignments at the start; {', '.join(map(str, setup['concurrency']))} "
            f"clients; {setup['warmup']} s warm-up and {setup['duration']} s measured per run; {setup['repeat']} "
            "rounds, metrics on and off alternating within each (the first of the two alternating between rounds)",
            "- cost: 1 - (on ÷ off), the throughput the metrics take; negative when the on runs were faster; "
            "app cpu: the gunicorn workers' CPU time per request",
            "",
            *markdown_section("## Metrics on and off", metrics_table(results["runs"])),
            *markdown_section("## Every run", runs_table(results["runs"])),
        ]
    )


def main(argv: list[str]) -> int:
    args = arguments(argv)
    with bench_prepared(args, CONFIGS, seeded=args.seeded) as ready:
        seed = ready.seed
        bench = MetricsBench(args, ready.server, ready.database_url, ready.token)
        runs = bench.rounds()
        results = {
            "setup": {
                **ready.setup("metrics", argv),
                "cpus": os.cpu_count(),
                "prometheus_client": version("prometheus-client"),
                "gunicorn": gunicorn_used(runs),
                "concurrency": args.concurrency,
                "warmup": args.warmup,
                "duration": args.duration,
                "repeat": args.repeat,
                "scenarios": args.scenarios,
                "seed": seed,
            },
            "runs": runs,
        }
        print("\nMetrics on and off (medians over rounds)\n" + as_text(metrics_table(runs)))
        json_path, markdown_path = results_files_write(
            directory=args.results_dir, name=args.results_name, data=results, markdown=results_markdown(results)
        )
        print(f"\nwrote {json_path} and {markdown_path}")
        return 1 if bench.requests_failed(runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
