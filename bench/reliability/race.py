"""The multi-process race: independent servers assigning the same new subjects at the same moment.

Several gunicorn servers, as several hosts would run them, share nothing but
the database: no process-local lock or cache can keep two of them from giving
one new subject two different variants, only the unique index on (experiment,
subject) can, with the loser of each INSERT ... ON CONFLICT DO NOTHING reading
the winner's row. Every client walks the same pool of new subject IDs in its
own random order, in batches, each request to a server picked at random, so a
subject reaches several servers within moments and overlapping batches arrive
in different orders (which would deadlock if rows were not inserted in a fixed
order).

Checks: one row per subject asked (count(*) = count(distinct subject_id) = the
subjects asked), every answer the client saw for a subject the variant stored
for it, the trigger-kept assignment counts exact, and no request failed.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.database import DatabaseServer
from bench.reliability.deployment import gunicorns, service_env, service_prepare
from bench.reliability.findings import Findings, failed_requests, several_variants, traffic_facts
from bench.reliability.traffic import Traffic
from bench.seed import COUNTS_NOT_EXACT, counts_exact

DATABASE = "bench_reliability_race"
EXAMPLES = 10


@dataclass(frozen=True)
class RaceOptions:
    servers: int
    workers: int
    clients: int
    seconds: float
    subjects: int
    batch: int


class PoolPlan:
    """The pool in this client's own random order, `size` IDs per request; shuffled again once asked through."""

    def __init__(self, *, pool: list[str], size: int, seed: str) -> None:
        self.pool = list(pool)
        self.size = size
        self.random = random.Random(seed)
        self.position = len(self.pool)

    def batch(self) -> list[str]:
        if self.position >= len(self.pool):
            self.random.shuffle(self.pool)
            self.position = 0
        subject_ids = self.pool[self.position : self.position + self.size]
        self.position += len(subject_ids)
        return subject_ids


def _stored(database_url: str) -> tuple[int, int, dict[str, str], bool]:
    """Rows, distinct subjects, each subject's stored variant key, and whether the counts are exact."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        rows, distinct = connection.execute(
            "SELECT count(*), count(DISTINCT subject_id) FROM assignments_assignment"
        ).fetchone()
        variants = dict(
            connection.execute(
                "SELECT a.subject_id, v.key FROM assignments_assignment a "
                "JOIN assignments_variant v ON v.id = a.variant_id"
            ).fetchall()
        )
        return rows, distinct, variants, counts_exact(connection)


def run_race(
    options: RaceOptions, *, server: DatabaseServer, secret_key: str, log_path: Path, run_id: str
) -> dict[str, Any]:
    database_url = server.recreate(DATABASE)
    try:
        env = service_env(database_url=database_url, secret_key=secret_key, GUNICORN_WORKERS=str(options.workers))
        token = service_prepare(env)
        pool = [f"race-{run_id}-{number:05d}" for number in range(options.subjects)]
        print(f"  starting {options.servers} gunicorn servers", flush=True)
        with gunicorns(options.servers, env=env, log_path=log_path) as fleet:
            print(f"  {options.clients} clients for {options.seconds:g} s", flush=True)
            with Traffic(
                make_plan=lambda index: PoolPlan(pool=pool, size=options.batch, seed=f"{run_id}-{index}"),
                addresses=fleet.addresses,
                token=token,
                clients=options.clients,
            ) as load:
                time.sleep(options.seconds)
        traffic = load.result
        rows, distinct, stored, exact = _stored(database_url)
        postgresql = server.version()
    finally:
        server.drop(DATABASE)
    differing = {
        subject_id: (variant, stored.get(subject_id))
        for subject_id, (variant, _) in traffic.answers.first.items()
        if stored.get(subject_id) != variant
    }
    result = {
        "options": asdict(options),
        "postgresql": postgresql,
        "gunicorn": asdict(fleet.settings),
        **traffic.summary(),
        "subjects_asked": len(traffic.asked),
        "subjects_answered": len(traffic.answers.first),
        "subjects_contested": traffic.contested,
        "rows": rows,
        "distinct_subjects": distinct,
        "counts_exact": exact,
        "subjects_with_several_variants": len(traffic.answers.conflicts),
        "several_variants_examples": {
            subject_id: sorted(variants) for subject_id, variants in list(traffic.answers.conflicts.items())[:EXAMPLES]
        },
        "subjects_answered_unlike_row": len(differing),
        "unlike_row_examples": dict(list(differing.items())[:EXAMPLES]),
    }
    result["failures"] = _failures(result)
    return result


def _failures(result: dict[str, Any]) -> list[str]:
    failures = []
    if result["rows"] != result["distinct_subjects"]:
        failures.append(f"{result['rows'] - result['distinct_subjects']:,} duplicate assignment rows")
    if result["distinct_subjects"] != result["subjects_asked"]:
        failures.append(f"{result['subjects_asked']:,} subjects asked, {result['distinct_subjects']:,} stored")
    failures += several_variants(result, examples="several_variants_examples")
    if result["subjects_answered_unlike_row"]:
        failures.append(
            f"{result['subjects_answered_unlike_row']:,} subjects answered with a variant other than the stored one "
            f"(answered, stored), e.g. {result['unlike_row_examples']}"
        )
    failures += failed_requests(result)
    if not result["counts_exact"]:
        failures.append(COUNTS_NOT_EXACT)
    return failures


def race_findings(result: dict[str, Any]) -> Findings:
    options, gunicorn = result["options"], result["gunicorn"]
    return Findings(
        title="Multi-process race",
        facts=[
            f"{options['servers']} independent gunicorn servers (each {gunicorn['worker_class']}, "
            f"{gunicorn['workers']} worker(s) x {gunicorn['threads']} threads) on one fresh database, "
            f"PostgreSQL {result['postgresql']}",
            f"{options['clients']} client processes, {options['batch']} subject IDs per request from one pool of "
            f"{options['subjects']:,} new subjects, each client in its own random order, each request to a server "
            "picked at random",
            *traffic_facts(result),
            f"subjects asked {result['subjects_asked']:,}, answered {result['subjects_answered']:,}; rows stored "
            f"{result['rows']:,}, distinct subjects in them {result['distinct_subjects']:,}",
            f"subjects raced for (requests from two or more clients in flight before the first answer for the "
            f"subject): {result['subjects_contested']:,}",
            f"subjects answered with more than one variant: {result['subjects_with_several_variants']:,}; "
            f"with a variant other than the stored one: {result['subjects_answered_unlike_row']:,}",
            f"assignment counts (assignments_assignmentcount) exact: {'yes' if result['counts_exact'] else 'NO'}",
        ],
        failures=result["failures"],
    )
