"""The database outage under load: PostgreSQL stops while requests keep coming, then comes back.

The cluster is private (devtools.cluster), so stopping it disturbs no one else;
gunicorn keeps running throughout, as it would while a database restarts or
fails over. Each request is judged by when it was sent:

- before: answered before `pg_ctl stop` was called;
- during the outage: sent after `pg_ctl stop -m fast` returned (the server
  gone) and answered before `pg_ctl start` was called. Expected: only 503
  database_unavailable with Retry-After, fast (a refused connection fails at once);
- after recovery: sent after the first 200 that followed the restart;
- the rest straddle a stop or a start, where a 200 or that 503 are both right.

Anything but a 200 or that 503, at any time, fails the run, as does no 200
within RECOVERY_LIMIT_SECONDS of the restart. Afterwards every subject assigned
before the outage is asked for again and must keep its variant. The gunicorn
log's growth during the outage shows whether the service aggregates repeated
failures or writes a line per failed request.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.reliability.deployment import gunicorns, service_env, service_prepare
from bench.reliability.findings import Findings, counts_text, latency_text, several_variants
from bench.reliability.traffic import Answers, MixedPlan, Record, Traffic, assignments_ask, latency_ms, outcomes
from bench.report import number
from devtools.cluster import private_cluster

RECOVERY_LIMIT_SECONDS = 30.0
EXISTING_SUBJECTS = 1000
DATABASE_UNAVAILABLE = "database_unavailable"
LOG_EXAMPLES = 5
EXAMPLES = 10
# gunicorn's "[2026-01-01 12:00:00 +0000] [1234] " and the service's "2026-01-01 12:00:00,123 ".
_LOG_STAMP = re.compile(r"^(\[[^\]]*\] \[\d+\] |\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+ )")


@dataclass(frozen=True)
class OutageOptions:
    clients: int
    before: float
    seconds: float
    after: float


def is_unavailable_answer(record: Record) -> bool:
    return record.status == 503 and record.code == DATABASE_UNAVAILABLE and bool(record.retry_after)


def _log_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def _distinct(lines: list[str]) -> list[str]:
    """The first LOG_EXAMPLES different lines, their time stamp and process ID left out."""
    return list(dict.fromkeys(_LOG_STAMP.sub("", line) for line in lines))[:LOG_EXAMPLES]


def _phase(records: list[Record]) -> dict[str, Any]:
    return {"requests": len(records), "outcomes": outcomes(records), "latency_ms": latency_ms(records)}


def run_outage(options: OutageOptions, *, secret_key: str, log_path: Path, run_id: str) -> dict[str, Any]:
    with private_cluster() as cluster:
        database_url, postgresql = cluster.create_database("service")
        env = service_env(database_url=database_url, secret_key=secret_key)
        token = service_prepare(env)
        print("  starting gunicorn", flush=True)
        with gunicorns(1, env=env, log_path=log_path) as fleet:
            address = fleet.addresses[0]
            existing = [f"outage-{run_id}-existing-{number:05d}" for number in range(EXISTING_SUBJECTS)]
            assigned_first = assignments_ask(address, token, existing)
            print(f"  {options.clients} clients: {options.before:g} s of load before the stop", flush=True)
            with Traffic(
                make_plan=lambda index: MixedPlan(
                    prefix=f"outage-{run_id}-{index}", existing=existing, seed=f"{run_id}-{index}"
                ),
                addresses=[address],
                token=token,
                clients=options.clients,
            ) as load:
                time.sleep(options.before)
                log_at_stop = len(_log_lines(log_path))
                stop_called = time.monotonic()
                cluster.stop()
                stopped = time.monotonic()
                print(f"  database stopped for {options.seconds:g} s", flush=True)
                time.sleep(max(0.0, stop_called + options.seconds - time.monotonic()))
                log_at_start = len(_log_lines(log_path))
                start_called = time.monotonic()
                cluster.start()
                started = time.monotonic()
                print("  database started; waiting for the first 200", flush=True)
                while load.last_ok() < start_called and time.monotonic() < start_called + RECOVERY_LIMIT_SECONDS:
                    time.sleep(0.05)
                time.sleep(options.after)
            traffic = load.result
            log_lines = _log_lines(log_path)
            answers = Answers.after(assigned_first, traffic.answers)
            assigned_before = {subject: variant for subject, (variant, at) in answers.first.items() if at < stop_called}
            try:
                asked_again: dict[str, str] | None = assignments_ask(address, token, list(assigned_before))
                ask_error = None
            except (RuntimeError, OSError) as error:
                asked_again, ask_error = None, f"{type(error).__name__}: {error}"[:500]
    records = traffic.records
    first_ok = min((record.ended for record in records if record.ok and record.started >= stopped), default=None)
    changed = (
        {}
        if asked_again is None
        else {
            subject: (variant, asked_again.get(subject))
            for subject, variant in assigned_before.items()
            if asked_again.get(subject) != variant
        }
    )
    outage = [record for record in records if record.started >= stopped and record.ended <= start_called]
    result = {
        "options": asdict(options),
        "postgresql": postgresql,
        "gunicorn": asdict(fleet.settings),
        "timeline_seconds": {
            "pg_ctl_stop": stopped - stop_called,
            "stop_call_to_start_call": start_called - stop_called,
            "pg_ctl_start": started - start_called,
            "start_call_to_first_200": None if first_ok is None else first_ok - start_called,
        },
        "before": _phase([record for record in records if record.ended < stop_called]),
        "outage": _phase(outage),
        "outage_unexpected": sum(not is_unavailable_answer(record) for record in outage),
        "after_recovery": _phase([] if first_ok is None else [r for r in records if r.started >= first_ok]),
        "unexpected_anytime": outcomes(
            record for record in records if not (record.ok or is_unavailable_answer(record))
        ),
        "retried_on_closed_connection": traffic.retries,
        "failed_between_calls": sum(
            not record.ok and stop_called <= record.ended <= start_called for record in records
        ),
        "log": {
            "outage_lines": log_at_start - log_at_stop,
            "outage_distinct": _distinct(log_lines[log_at_stop:log_at_start]),
            "recovery_lines": len(log_lines) - log_at_start,
            "recovery_distinct": _distinct(log_lines[log_at_start:]),
        },
        "subjects_assigned_before": len(assigned_before),
        "ask_again_error": ask_error,
        "subjects_changed": len(changed),
        "changed_examples": dict(list(changed.items())[:EXAMPLES]),
        "subjects_with_several_variants": len(answers.conflicts),
    }
    result["failures"] = _failures(result)
    return result


def _failures(result: dict[str, Any]) -> list[str]:
    failures = []
    outage = result["outage"]
    if not outage["requests"]:
        failures.append("no request was sent and answered within the outage")
    if result["outage_unexpected"]:
        failures.append(
            f"{result['outage_unexpected']:,} answers during the outage were not 503 {DATABASE_UNAVAILABLE} with "
            f"Retry-After: {counts_text(outage['outcomes'])}"
        )
    if result["unexpected_anytime"]:
        failures.append(
            f"answers other than 200 or 503 {DATABASE_UNAVAILABLE}: {counts_text(result['unexpected_anytime'])}"
        )
    if result["timeline_seconds"]["start_call_to_first_200"] is None:
        failures.append(f"no 200 within {RECOVERY_LIMIT_SECONDS:g} s of the restart")
    elif result["timeline_seconds"]["start_call_to_first_200"] > RECOVERY_LIMIT_SECONDS:
        failures.append(
            f"the first 200 came {result['timeline_seconds']['start_call_to_first_200']:.1f} s after the restart"
        )
    if result["ask_again_error"]:
        failures.append(f"asking again for the subjects assigned before the outage failed: {result['ask_again_error']}")
    if result["subjects_changed"]:
        failures.append(
            f"{result['subjects_changed']:,} subjects assigned before the outage have another variant now "
            f"(before, after), e.g. {result['changed_examples']}"
        )
    return failures + several_variants(result)


def outage_findings(result: dict[str, Any]) -> Findings:
    options, gunicorn, timeline, log = result["options"], result["gunicorn"], result["timeline_seconds"], result["log"]
    before, outage, after = result["before"], result["outage"], result["after_recovery"]
    facts = [
        f"a private PostgreSQL {result['postgresql']} cluster, one gunicorn ({gunicorn['worker_class']}, "
        f"{gunicorn['workers']} workers x {gunicorn['threads']} threads); {options['clients']} client processes "
        f"sending one subject per request, half new, half one of {EXISTING_SUBJECTS:,} assigned beforehand",
        f"load for {options['before']:g} s, then `pg_ctl stop -m fast` "
        f"(returned after {timeline['pg_ctl_stop']:.2f} s); "
        f"`pg_ctl start` called {timeline['stop_call_to_start_call']:.1f} s after the stop call (returned after "
        f"{timeline['pg_ctl_start']:.2f} s); load kept {options['after']:g} s past the first 200",
        f"before the stop: {before['requests']:,} requests; {counts_text(before['outcomes'])}; "
        f"latency {latency_text(before['latency_ms'])}",
        f"during the outage: {outage['requests']:,} requests; {counts_text(outage['outcomes'])}; "
        f"latency {latency_text(outage['latency_ms'])}",
        f"first 200 {number(timeline['start_call_to_first_200'], 2)} s after `pg_ctl start` was called",
        f"after recovery: {after['requests']:,} requests; {counts_text(after['outcomes'])}; "
        f"latency {latency_text(after['latency_ms'])}",
        f"answers other than 200 or 503 {DATABASE_UNAVAILABLE} at any time: "
        f"{counts_text(result['unexpected_anytime'])}",
        f"requests sent again after the server closed a kept connection: {result['retried_on_closed_connection']:,}",
        f"subjects assigned before the outage and asked again after it: {result['subjects_assigned_before']:,}, "
        f"of which changed: {result['subjects_changed']:,}",
        f"gunicorn log lines written between the stop and start calls: {log['outage_lines']:,}, while "
        f"{result['failed_between_calls']:,} requests failed; from the start call to the end: "
        f"{log['recovery_lines']:,}",
        *(f"outage log line: `{line}`" for line in log["outage_distinct"]),
        *(f"recovery log line: `{line}`" for line in log["recovery_distinct"]),
    ]
    return Findings(title="Database outage under load", facts=facts, failures=result["failures"])
