"""SQL statements per request, counted in-process with Django's CaptureQueriesContext.

Runs the whole Django request stack (middleware, DRF, the view) through the test
client against the benchmark database, one request per scenario shape after a
warm-up request has filled the process's caches. Statements sent outside
Django's cursor wrapper (the CONN_HEALTH_CHECKS `SELECT 1`) are not seen here;
the server-side transaction count of each run covers those.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from bench.scenarios import EXPERIMENT_ID, Scenario, SubjectIds


@dataclass(frozen=True)
class StatementCount:
    scenario: str
    subjects: int
    statements: int
    sql: list[str]


_TABLE = re.compile(r'\b(?:FROM|JOIN|INTO|UPDATE)\s+"?(\w+)"?(?!\w|\()', re.IGNORECASE)


def statement_summary(sql: str) -> str:
    """`SELECT tokens_apitoken`: the statement's verb and the tables it names."""
    tables = dict.fromkeys(_TABLE.findall(sql))
    return " ".join([sql.split()[0].upper(), "+".join(tables)])


def statements_count(*, scenarios: list[Scenario], token: str, seeded: int) -> list[StatementCount]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_HOST": "127.0.0.1"}

    def post(ids: list[str]) -> None:
        body = json.dumps({"experiment_id": EXPERIMENT_ID, "subject_ids": ids})
        response = client.post("/experiment-assignments", body, content_type="application/json", **headers)
        if response.status_code != 200:
            raise RuntimeError(f"statement count: HTTP {response.status_code}: {response.content[:300]!r}")

    counts = []
    for scenario in scenarios:
        ids = SubjectIds(scenario=scenario, prefix=f"count-{scenario.key}", seeded=seeded, seed=0)
        post(ids.next_batch())
        with CaptureQueriesContext(connection) as captured:
            post(ids.next_batch())
        counts.append(
            StatementCount(
                scenario=scenario.key,
                subjects=scenario.subjects,
                statements=len(captured.captured_queries),
                sql=[statement_summary(query["sql"]) for query in captured.captured_queries],
            )
        )
    return counts
