"""SQL statements per request, counted in-process with Django's CaptureQueriesContext.

Runs the whole Django request stack (middleware, DRF, the view) through the test
client against the benchmark database, one request per scenario shape after a
warm-up request has filled the process's caches. Statements sent outside
Django's cursor wrapper (the CONN_HEALTH_CHECKS `SELECT 1`, /healthz's `SELECT 1`
on a connection of its own) are not seen here, so /healthz is left out; the
server-side transaction count of each run covers those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.client import PATHS, request_body
from bench.scenarios import ASSIGN, LINK, SUBJECT, Scenario, SubjectIds


@dataclass(frozen=True)
class StatementCount:
    scenario: str
    subjects: int
    statements: int
    sql: list[str]


# What Django's query log holds for the statements of transaction.atomic(), which no cursor runs.
_TRANSACTION = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})

_TABLE = re.compile(r'\b(?:FROM|JOIN|INTO|UPDATE)\s+(?!LATERAL\b)"?(\w+)"?(?!\w|\()', re.IGNORECASE)
# The names a WITH clause gives its parts (`walk(start_type, ...) AS (`), which are not tables.
_CTE = re.compile(r"\b(\w+)\s*(?:\([\w\s,]*\))?\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.IGNORECASE)


def statement_summary(sql: str) -> str:
    """`SELECT tokens_apitoken`: the statement's verb and the tables it names (`WITH RECURSIVE` for a recursive
    statement, whose verb comes after its parts)."""
    words = sql.split()
    verb = " ".join(words[:2]).upper() if len(words) > 1 and words[1].upper() == "RECURSIVE" else words[0].upper()
    ctes = set(_CTE.findall(sql)) if verb.startswith("WITH") else set()
    tables = [table for table in dict.fromkeys(_TABLE.findall(sql)) if table not in ctes]
    return " ".join([verb, "+".join(tables)]).strip()


def statements_count(*, scenarios: list[Scenario], token: str, seeded: int, prefix: str) -> list[StatementCount]:
    """One count per scenario that sends statements through Django; new subject IDs start with `prefix`."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_HOST": "127.0.0.1"}

    def post(scenario: Scenario, ids: list[str]) -> None:
        body = request_body(scenario, ids)
        response = client.post(PATHS[scenario.kind], body, content_type="application/json", **headers)
        if response.status_code != 200:
            raise RuntimeError(f"statement count: HTTP {response.status_code}: {response.content[:300]!r}")

    counts = []
    for scenario in scenarios:
        if scenario.kind not in (ASSIGN, SUBJECT, LINK):
            continue
        ids = SubjectIds(scenario=scenario, prefix=f"{prefix}-count-{scenario.key}", seeded=seeded, seed=0)
        post(scenario, ids.next_batch())
        texts: list[str] = []

        def record(execute, sql, params, many, context, texts=texts):
            texts.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(record), CaptureQueriesContext(connection) as captured:
            post(scenario, ids.next_batch())
        # The log has no text for a prepared statement (core/database.py): take it as the cursor got it.
        cursor_texts = iter(texts)
        sql = [query["sql"] if query["sql"] in _TRANSACTION else next(cursor_texts) for query in captured]
        counts.append(
            StatementCount(
                scenario=scenario.key,
                subjects=scenario.subjects,
                statements=len(sql),
                sql=[statement_summary(text) for text in sql],
            )
        )
    return counts
