"""A hot endpoint's request costs what it costs today, counted, not timed: the Python calls the WSGI
application makes for it (config.wsgi, sys.setprofile) within a budget, and its SQL statements exactly (the
served application, config.asgi, is held to its own in tests/core/edge/test_asgi.py). A
middleware or a layer added in front of the edge's endpoints, or a cache they stop using, fails here.

The budgets are the counts measured when they were set, with room for a new Django, DRF or psycopg release
to move them a little (BUDGET_ROOM); a change that needs more must raise them here, in sight."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.helpers.api import ApiClient

# Below what Django's handler with every middleware and DRF would cost for the same requests (a fifth more calls).
BUDGET_ROOM = 1.1
ASSIGN = {"experiment_id": "checkout-button", "subject_ids": ["w-1"]}
ONE_SUBJECT = {"subject": {"user": "w-1"}, "experiments": ["checkout-button"]}
EVALUATE = {"context": {"targetingKey": "w-1"}}
EVALUATE_BULK = {"context": {"targetingKey": "w-1", "subjectType": "user"}}
LINK = {"identifiers": [{"subject_type": "user", "subject_id": "w-1"}, {"subject_type": "cookie", "subject_id": "c-1"}]}
# Python calls measured for one request whose answer is stored already (the token and the configuration
# cached), and its statements.
# On PostgreSQL, a little more than on SQLite; the test client's own calls included.
MEASURED = {
    "experiment-assignments": (686, 1),
    "assignments": (707, 1),
    "id-link": (648, 1),
    "healthz": (308, 0),
    "ofrep-flag": (651, 1),
    "ofrep-flags": (660, 1),
}


def python_calls(request: Callable[[], object]) -> int:
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        request()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.single_node("Citus's hot path sends other statements (tests/assignments/test_storage_citus.py)")
@pytest.mark.parametrize("endpoint", MEASURED)
def test_hot_request__answer_stored__python_calls_within_budget_and_statements_exact(
    demo_config, proxy_token, endpoint
):
    api = ApiClient(proxy_token)
    request = {
        "experiment-assignments": lambda: api.post("/experiment-assignments", ASSIGN),
        "assignments": lambda: api.post("/assignments", ONE_SUBJECT),
        "id-link": lambda: api.post("/id-link", LINK),
        "healthz": lambda: api.get("/healthz"),
        "ofrep-flag": lambda: api.post("/ofrep/v1/evaluate/flags/checkout-button", EVALUATE),
        "ofrep-flags": lambda: api.post("/ofrep/v1/evaluate/flags", EVALUATE_BULK),
    }[endpoint]
    for _ in range(2):
        assert request().status_code == 200
    calls, statements = MEASURED[endpoint]

    counted = python_calls(request)
    with CaptureQueriesContext(connection) as captured:
        request()

    assert counted <= calls * BUDGET_ROOM, f"{counted} Python calls, budget {calls} (x{BUDGET_ROOM})"
    assert len(captured.captured_queries) == statements
