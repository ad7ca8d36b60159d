"""Staff console pages timed in-process: Django's test client, logged in as a superuser, on the bench database.

Each page is requested once cold (its first request in this process; the
database's cache is as the load left it) and then `runs` times warm. Every
request's statements are captured (CaptureQueriesContext); the slowest one of
the last run, and every read of a table that grows with the assignments, is
run again under EXPLAIN (ANALYZE, BUFFERS), so the results show which indexes
answer them.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

TARGET_MS = 1000
PLAN_LINES = 40
# The tables that grow with the assignments: the plans of their reads show whether an index answers them.
BIG_TABLE = re.compile(r"\b(assignments_assignment|assignments_assignmentcount|idlinks_identifierlink)\b")


@dataclass(frozen=True)
class Page:
    key: str
    title: str
    path: str
    # Text the page shows when it is the page meant (the health panel's chart, the subject searched).
    expect: str


def admin_pages(
    *, experiment: tuple[int, str], older: tuple[int, str], subject_id: str, subject_type: str
) -> list[Page]:
    """The pages, for the big experiment (pk, key), a small one stored before it, and one subject."""
    assignments = "/admin/assignments/assignment/"
    in_experiment = {"experiment__id__exact": experiment[0]}
    lookup = {"subject_type": subject_type, "subject_id": subject_id, "depth": 2}
    return [
        Page("experiment", "experiment change page", f"/admin/assignments/experiment/{experiment[0]}/change/", "<svg"),
        Page("assignments", "assignment list", assignments, "Select assignment"),
        Page(
            "assignments-experiment",
            "assignment list, one experiment",
            f"{assignments}?{urlencode(in_experiment)}",
            experiment[1],
        ),
        Page(
            "assignments-older",
            "assignment list, a small older experiment",
            f"{assignments}?{urlencode({'experiment__id__exact': older[0]})}",
            older[1],
        ),
        Page("search", "exact subject search", f"{assignments}?{urlencode({'q': subject_id})}", subject_id),
        Page(
            "search-experiment",
            "exact subject search, one experiment",
            f"{assignments}?{urlencode({**in_experiment, 'q': subject_id})}",
            subject_id,
        ),
        Page("lookup", "subject lookup, depth 2", f"{assignments}lookup/?{urlencode(lookup)}", subject_id),
    ]


def _request(client, path: str) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    # CaptureQueriesContext rounds each statement's time to the millisecond; this times them finer.
    durations: list[float] = []

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            durations.append((time.perf_counter() - started) * 1000)

    record: dict[str, Any] = {"status": None, "error": None, "content": ""}
    with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(timed):
        started = time.perf_counter()
        try:
            response = client.get(path)
            record.update(status=response.status_code, content=response.content.decode(errors="replace"))
        except Exception as error:
            # A page under construction may fail: reported, and the other pages are still measured.
            record["error"] = repr(error)[:500]
        record["ms"] = (time.perf_counter() - started) * 1000
    # Both see every statement sent through Django's cursor, in the same order.
    record["queries"] = [
        {"sql": query["sql"], "ms": ms} for query, ms in zip(captured.captured_queries, durations, strict=True)
    ]
    return record


def _explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
        lines = [line for (line,) in cursor.fetchall()]
    if len(lines) > PLAN_LINES:
        lines = [*lines[:PLAN_LINES], f"... ({len(lines) - PLAN_LINES} more lines)"]
    return "\n".join(lines)


def _explained(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The slowest read and every read of a big table, in the page's order, each with its plan.

    Only SELECTs: the paginator's EXPLAIN, cursor declarations and session writes cannot be explained again.
    """
    reads = [query for query in queries if query["sql"].lstrip().upper().startswith(("SELECT", "WITH"))]
    if not reads:
        return []
    slowest = max(reads, key=lambda query: query["ms"])
    return [
        {**query, "slowest": query is slowest, "plan": _explain(query["sql"])}
        for query in reads
        if query is slowest or BIG_TABLE.search(query["sql"])
    ]


def page_measure(client, page: Page, *, runs: int) -> dict[str, Any]:
    record: dict[str, Any] = {"key": page.key, "title": page.title, "path": page.path}
    cold = _request(client, page.path)
    record.update(
        status=cold["status"],
        cold_ms=cold["ms"],
        # Tells a slow first request's database time from its Python time.
        cold_sql_ms=sum(query["ms"] for query in cold["queries"]),
        error=cold["error"],
    )
    if cold["status"] != 200:
        return record
    record["shows_expected"] = page.expect in cold["content"]
    warm = [_request(client, page.path) for _ in range(runs)]
    record.update(
        warm_ms=[run["ms"] for run in warm],
        median_ms=statistics.median(run["ms"] for run in warm),
        queries=[len(run["queries"]) for run in [cold, *warm]],
        sql_median_ms=statistics.median(sum(query["ms"] for query in run["queries"]) for run in warm),
        statements=[query["sql"] for query in warm[-1]["queries"]],
        explained=_explained(warm[-1]["queries"]),
        failed_runs=sum(run["status"] != 200 for run in warm),
    )
    return record


def pages_measure(pages: list[Page], *, runs: int) -> list[dict[str, Any]]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_superuser("bench-admin", email="bench@example.com", password=None)
    # The host the benchmarks' gunicorn answers on: config.settings allows it by default.
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    records = []
    for page in pages:
        records.append(page_measure(client, page, runs=runs))
        record = records[-1]
        if record["status"] == 200:
            print(
                f"  {page.title:<38} cold {record['cold_ms']:>8,.1f} ms  median {record['median_ms']:>8,.1f} ms  "
                f"queries {record['queries'][-1]}",
                flush=True,
            )
        else:
            print(f"  {page.title:<38} HTTP {record['status']} {record['error'] or ''}", flush=True)
    return records
