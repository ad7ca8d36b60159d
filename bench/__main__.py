"""bench/run <benchmark> [options]: the one entry point of every benchmark (bench/README.md).

Each benchmark is a module with `main(argv) -> exit status` and its own
options (`bench/run <benchmark> --help`); it is imported only when chosen, so
one benchmark's needs (Django settings, py-spy, psql) never stop another.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name: (module, what it measures)
BENCHMARKS = {
    "hot-path": ("bench.hot_path", "the assignment endpoints as deployed beside a minimal app and raw SQL"),
    "admin": ("bench.admin", "the staff console on millions of assignments, and what the count triggers cost"),
    "commands": ("bench.commands", "the data commands (export, import, delete) beside psql doing the same"),
    "metrics": ("bench.metrics", "what the Prometheus metrics cost the hot path: METRICS_ENABLED on and off"),
    "framework": ("bench.framework", "what each layer of the service costs a small request, in one process"),
    "metrics-calls": ("bench.metrics_calls", "the counting calls of one request, timed in one process"),
    "binding": ("bench.binding", "client CPU of the ways to pass a batch of IDs to PostgreSQL"),
    "reliability": ("bench.reliability", "races, a database outage and a soak against the service as deployed"),
    "citus": ("bench.citus", "the hot path on plain PostgreSQL and on a local Citus cluster, compared"),
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/run",
        description=__doc__.split("\n\n")[0],
        epilog="benchmarks:\n"
        + "\n".join(f"  {name:<14} {summary}" for name, (_, summary) in BENCHMARKS.items())
        + "\n\nbench/run <benchmark> --help lists a benchmark's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("benchmark", choices=BENCHMARKS, metavar="benchmark", help="one of the benchmarks below")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options")
    args = parser.parse_args(argv[:1])
    module = importlib.import_module(BENCHMARKS[args.benchmark][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
