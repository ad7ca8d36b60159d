"""The ASGI application gunicorn serves (config.asgi): the edge's paths answered on the event loop on
PostgreSQL, as the WSGI application answers them, at a counted cost; every other path, and every edge path
on SQLite, by the WSGI application in its threads. On committed data: the loop's pool does not see a test's
transaction."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.core.signals import request_finished, request_started
from django.db import connection

from core.edge.asgi import SIGNALS_ACCOUNTED
from tests.core.edge.test_work_counted import (
    ASSIGN,
    BUDGET_ROOM,
    EVALUATE,
    EVALUATE_BULK,
    LINK,
    ONE_SUBJECT,
    python_calls,
)
from tests.helpers.api import ApiClient, assert_problem
from tests.helpers.asgi import AsgiClient
from tests.helpers.server import database_url_for_tests

pytestmark = pytest.mark.django_db(transaction=True)

REQUESTS = {
    "experiment-assignments": ("/experiment-assignments", ASSIGN),
    "assignments": ("/assignments", ONE_SUBJECT),
    "id-link": ("/id-link", LINK),
    "healthz": ("/healthz", None),
    "ofrep-flag": ("/ofrep/v1/evaluate/flags/checkout-button", EVALUATE),
    "ofrep-flags": ("/ofrep/v1/evaluate/flags", EVALUATE_BULK),
}
# Python calls measured on the loop for one request whose answer is stored already (the token and the
# configuration cached), the client's own included, and the statements the pool sent for it.
MEASURED = {
    "experiment-assignments": (660, 1),
    "assignments": (681, 1),
    "id-link": (670, 1),
    "healthz": (262, 0),
    "ofrep-flag": (625, 1),
    "ofrep-flags": (634, 1),
}
# Differ between any two answers.
PER_ANSWER = {"x-request-id", "date", "server"}


@pytest.fixture
def asgi(proxy_token) -> Iterator[AsgiClient]:
    client = AsgiClient(proxy_token)
    yield client
    client.close()


def sent(client: AsgiClient, endpoint: str):
    path, body = REQUESTS[endpoint]
    return client.get(path) if body is None else client.post(path, body)


def test_signals__every_receiver_of_request_started_and_finished__accounted_for_by_the_loop():
    # Given the application made, as gunicorn loads it (its middleware connects receivers)
    import config.asgi  # noqa: F401

    receivers = {
        f"{found.__module__}.{found.__qualname__}"
        for signal in (request_started, request_finished)
        for _, reference, _ in signal.receivers
        if (found := reference()) is not None
    }

    assert receivers == set(SIGNALS_ACCOUNTED)


@pytest.mark.single_node("Citus's hot path runs in the WSGI application's threads")
@pytest.mark.parametrize("endpoint", REQUESTS)
def test_hot_request__answered_as_the_wsgi_application_answers(demo_config, proxy_token, asgi, endpoint):
    wsgi = ApiClient(proxy_token)
    path, body = REQUESTS[endpoint]
    wsgi_sent = (lambda: wsgi.get(path)) if body is None else (lambda: wsgi.post(path, body))
    first = sent(asgi, endpoint)

    answers = [sent(asgi, endpoint), wsgi_sent()]

    assert first.status_code == 200, first.content
    loop, threads = answers
    assert (loop.status_code, loop.json()) == (threads.status_code, threads.json())
    shown = [
        {name.lower(): value for name, value in answer.headers.items() if name.lower() not in PER_ANSWER}
        for answer in answers
    ]
    assert shown[0] == shown[1]
    assert loop["X-Request-ID"] != threads["X-Request-ID"]


@pytest.mark.postgres
@pytest.mark.single_node("Citus's hot path runs in the WSGI application's threads")
@pytest.mark.parametrize("endpoint", MEASURED)
def test_hot_request__answer_stored__on_the_loop_within_budget_and_statements_exact(demo_config, asgi, endpoint):
    for _ in range(2):
        assert sent(asgi, endpoint).status_code == 200
    calls, statements = MEASURED[endpoint]
    before = asgi.app.driver.sent

    counted = python_calls(lambda: sent(asgi, endpoint))

    assert counted <= calls * BUDGET_ROOM, f"{counted} Python calls, budget {calls} (x{BUDGET_ROOM})"
    assert asgi.app.driver.sent - before == statements


@pytest.mark.postgres
@pytest.mark.single_node("Citus's hot path runs in the WSGI application's threads")
def test_pool_connection_broken__statement_sent_again_on_a_new_one(demo_config, asgi):
    # Given the pool's connections, made by a first request, all ended by the server (a restart, a failover)
    assert sent(asgi, "experiment-assignments").status_code == 200
    with psycopg.connect(database_url_for_tests(), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND pid <> %s",
            [connection.connection.info.backend_pid if connection.connection else 0],
        )

    # When / Then
    answer = sent(asgi, "experiment-assignments")
    assert answer.status_code == 200, answer.content


@pytest.mark.parametrize(
    ("request_options", "status", "code"),
    [
        ({"token": None}, 401, "not_authenticated"),
        ({"data": "{", "headers": {"content-type": "application/json"}}, 400, "malformed_json"),
        ({"headers": {"content-type": "text/plain"}}, 415, "unsupported_media_type"),
        ({"data": {"experiment_id": "nope", "subject_ids": ["u"]}}, 404, "experiment_not_found"),
        ({"data": "x" * 3_000_000}, 413, "payload_too_large"),
        ({"data": "x" * 3_000_000, "chunked": True}, 413, "payload_too_large"),
        ({"headers": {"host": "evil.example"}}, 400, "invalid_request"),
    ],
    ids=["no-token", "malformed", "media-type", "unknown", "too-large", "too-large-chunked", "host"],
)
def test_refused_request__problem_as_the_wsgi_application_answers(
    demo_config, proxy_token, request_options, status, code
):
    options = dict(request_options)
    client = AsgiClient(None if "token" in options and options.pop("token") is None else proxy_token)
    try:
        data = options.pop("data", ASSIGN)
        answer = client.post("/experiment-assignments", data, **options)
    finally:
        client.close()

    body = assert_problem(answer, status=status, code=code)
    assert body["request_id"] == answer["X-Request-ID"]


def test_request_id__one_sent__answered_with_it(demo_config, asgi):
    answer = asgi.post("/experiment-assignments", ASSIGN, headers={"x-request-id": "abc-123"})

    assert answer.status_code == 200
    assert answer["X-Request-ID"] == "abc-123"


def test_healthz_head__no_body_from_the_server(asgi):
    answer = asgi.request("HEAD", "/healthz")

    assert answer.status_code == 200
    assert answer["Cache-Control"] == "no-store"


def test_other_path__answered_by_the_wsgi_application(asgi):
    answer = asgi.get("/no-such-path")

    assert_problem(answer, status=404, code="not_found")
