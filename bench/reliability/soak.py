"""The soak: constant load through one gunicorn for minutes, watching what must not grow.

A leak shows only over time: memory of a worker that grows with every request,
database connections opened and never closed, a rate that sinks as some cache or
table fills. Client processes send requests without pause (half for new
subjects, half for assigned ones) on a fresh database; every interval the
benchmark samples each gunicorn process's resident memory (VmRSS in
/proc/<pid>/status; the workers are the master's children) and the database's
connection count (pg_stat_activity). Flat memory, a flat connection count and a
steady rate are the expected result.

gunicorn recycles a worker after GUNICORN_MAX_REQUESTS requests (deploy/gunicorn.conf.py:
1,000,000 +/- 100,000): a recycled worker's memory tells nothing about a slow leak, so
the soak runs with recycling off unless told otherwise, and names any worker
that disappeared. Checks: no request failed, no subject was given two variants,
the assignment counts are exact.
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.cpu import children_of
from bench.database import DatabaseServer
from bench.reliability.deployment import gunicorns, service_env, service_prepare
from bench.reliability.findings import Findings, failed_requests, several_variants, traffic_facts
from bench.reliability.traffic import Answers, MixedPlan, Traffic, assignments_ask
from bench.report import Table
from bench.seed import COUNTS_NOT_EXACT, table_state

DATABASE = "bench_reliability_soak"
EXISTING_SUBJECTS = 1000
MASTER = "master"


@dataclass(frozen=True)
class SoakOptions:
    seconds: float
    clients: int
    interval: float
    max_requests: int


def rss_kib(pid: int) -> int | None:
    """The process's resident memory in KiB; None once it has exited."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("VmRSS:")), None)


def _sample(*, began: float, master: int, server: DatabaseServer) -> dict[str, Any]:
    rss = {str(pid): kib for pid in sorted(children_of(master)) if (kib := rss_kib(pid)) is not None}
    return {
        "at": time.monotonic() - began,
        "master_rss_kib": rss_kib(master),
        "worker_rss_kib": rss,
        "connections": len(server.backend_pids(DATABASE)),
    }


def _print_sample(sample: dict[str, Any]) -> None:
    workers = ", ".join(f"{pid} {kib / 1024:.1f}" for pid, kib in sample["worker_rss_kib"].items())
    print(f"  {sample['at']:6.0f} s  db connections {sample['connections']:3d}  worker RSS MiB: {workers}", flush=True)


def run_soak(
    options: SoakOptions, *, server: DatabaseServer, secret_key: str, log_path: Path, run_id: str
) -> dict[str, Any]:
    database_url = server.recreate(DATABASE)
    try:
        env = service_env(
            database_url=database_url, secret_key=secret_key, GUNICORN_MAX_REQUESTS=str(options.max_requests)
        )
        token = service_prepare(env)
        print("  starting gunicorn", flush=True)
        with gunicorns(1, env=env, log_path=log_path) as fleet:
            master = fleet.servers[0].process.pid
            existing = [f"soak-{run_id}-existing-{number:05d}" for number in range(EXISTING_SUBJECTS)]
            assigned_first = assignments_ask(fleet.addresses[0], token, existing)
            print(f"  {options.clients} clients for {options.seconds:g} s, sampled every {options.interval:g} s")
            samples = []
            with Traffic(
                make_plan=lambda index: MixedPlan(
                    prefix=f"soak-{run_id}-{index}", existing=existing, seed=f"{run_id}-{index}"
                ),
                addresses=fleet.addresses,
                token=token,
                clients=options.clients,
            ) as load:
                end = load.began + options.seconds
                at = load.began
                while True:
                    time.sleep(max(0.0, at - time.monotonic()))
                    samples.append(_sample(began=load.began, master=master, server=server))
                    _print_sample(samples[-1])
                    if at >= end:
                        break
                    at = min(at + options.interval, end)
            traffic = load.result
        answers = Answers.after(assigned_first, traffic.answers)
        with psycopg.connect(database_url, autocommit=True) as connection:
            state = table_state(connection)
        postgresql = server.version()
    finally:
        server.drop(DATABASE)
    starts = [record.started - traffic.began for record in traffic.records]
    intervals = []
    for earlier, later in itertools.pairwise(samples):
        low, high = bisect.bisect_left(starts, earlier["at"]), bisect.bisect_left(starts, later["at"])
        window = traffic.records[low:high]
        intervals.append(
            {
                "from": earlier["at"],
                "to": later["at"],
                "requests_per_second": len(window) / (later["at"] - earlier["at"]),
                "errors": sum(not record.ok for record in window),
                "connections": later["connections"],
                "worker_rss_kib": later["worker_rss_kib"],
            }
        )
    result = {
        "options": asdict(options),
        "postgresql": postgresql,
        "gunicorn": asdict(fleet.settings),
        **traffic.summary(),
        "samples": samples,
        "intervals": intervals,
        "workers": _workers(samples),
        "subjects_with_several_variants": len(answers.conflicts),
        "end": state,
    }
    result["failures"] = _failures(result)
    return result


def _workers(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each worker PID seen, with its first, last and largest RSS, and whether it was gone by the end."""
    workers: dict[str, dict[str, Any]] = {}
    for sample in samples:
        for pid, kib in sample["worker_rss_kib"].items():
            worker = workers.setdefault(pid, {"pid": int(pid), "first_at": sample["at"], "first_rss_kib": kib})
            worker.update(last_at=sample["at"], last_rss_kib=kib, max_rss_kib=max(kib, worker.get("max_rss_kib", 0)))
    for pid, worker in workers.items():
        worker["recycled"] = pid not in samples[-1]["worker_rss_kib"]
    return list(workers.values())


def _failures(result: dict[str, Any]) -> list[str]:
    failures = [*failed_requests(result), *several_variants(result)]
    if not result["end"]["counts_exact"]:
        failures.append(COUNTS_NOT_EXACT)
    return failures


def _mib(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.1f}"


def _intervals_table(result: dict[str, Any]) -> Table:
    header = ["from s", "to s", "req/s", "errors", "db connections", "worker RSS MiB (pid)"]
    rows = [
        [
            f"{interval['from']:.0f}",
            f"{interval['to']:.0f}",
            f"{interval['requests_per_second']:,.1f}",
            str(interval["errors"]),
            str(interval["connections"]),
            ", ".join(f"{_mib(kib)} ({pid})" for pid, kib in interval["worker_rss_kib"].items()),
        ]
        for interval in result["intervals"]
    ]
    return header, rows


def _workers_table(result: dict[str, Any]) -> Table:
    header = ["worker pid", "seen from s", "to s", "first RSS MiB", "last RSS MiB", "max RSS MiB", "recycled"]
    rows = [
        [
            str(worker["pid"]),
            f"{worker['first_at']:.0f}",
            f"{worker['last_at']:.0f}",
            _mib(worker["first_rss_kib"]),
            _mib(worker["last_rss_kib"]),
            _mib(worker["max_rss_kib"]),
            "yes" if worker["recycled"] else "no",
        ]
        for worker in result["workers"]
    ]
    return header, rows


def soak_findings(result: dict[str, Any]) -> Findings:
    options, gunicorn, samples = result["options"], result["gunicorn"], result["samples"]
    # The first sample is taken as the load begins: connections open with the first requests.
    connections = [sample["connections"] for sample in samples[1:]] or [samples[0]["connections"]]
    recycled = [worker["pid"] for worker in result["workers"] if worker["recycled"]]
    recycling = (
        "off (GUNICORN_MAX_REQUESTS=0), so each worker lives through the whole soak"
        if options["max_requests"] == 0
        else f"after {options['max_requests']:,} requests (GUNICORN_MAX_REQUESTS, plus jitter)"
    )
    facts = [
        f"one gunicorn ({gunicorn['worker_class']}, {gunicorn['workers']} workers x {gunicorn['threads']} threads) on "
        f"a fresh database, PostgreSQL {result['postgresql']}; worker recycling {recycling}",
        f"{options['clients']} client processes without pause, one subject per request, half new, half one of "
        f"{EXISTING_SUBJECTS:,} assigned beforehand; sampled every {options['interval']:g} s",
        *traffic_facts(result),
        f"database connections from the first interval on: min {min(connections)}, max {max(connections)} "
        f"(the workers' threads: {gunicorn['workers'] * gunicorn['threads']})",
        f"master RSS: {_mib(samples[0]['master_rss_kib'])} MiB at the start, "
        f"{_mib(samples[-1]['master_rss_kib'])} MiB at the end",
        f"recycled workers (PIDs gone by the end): {', '.join(map(str, recycled)) or 'none'}",
        f"assignments stored at the end: {result['end']['assignments']:,}; counts exact: "
        f"{'yes' if result['end']['counts_exact'] else 'NO'}",
    ]
    return Findings(
        title="Soak",
        facts=facts,
        tables=[("Per interval", _intervals_table(result)), ("Per worker", _workers_table(result))],
        failures=result["failures"],
    )
