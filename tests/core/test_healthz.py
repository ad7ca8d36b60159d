"""/healthz and the answers to a database outage (docs/explanation/health-and-outages.md)."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.core.handlers.exception import convert_exception_to_response
from django.db import connection, connections
from django.test import RequestFactory

from core.healthz import DatabaseProbe, ProbeConnection, connection_open, database_probe, probe_connection
from core.middleware.guards import DatabaseUnavailableMiddleware
from tests.helpers.api import PROBLEM_CONTENT_TYPE, ApiClient
from tests.helpers.database import database_unreachable
from tests.helpers.server import wait_until

OK = {"status": "ok", "database": "ok"}
UNAVAILABLE = {"status": "unavailable", "database": "unavailable"}


@pytest.fixture
def anonymous_client(db) -> ApiClient:
    """A client of the served application without a token; `db` makes the probe's new connection find the
    test database."""
    return ApiClient(None)


@contextlib.contextmanager
def silent_database():
    """Point PostgreSQL settings at a socket that accepts connections and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        # Connections complete in the kernel's backlog; nothing ever reads or answers them.
        listener.listen(64)
        settings_dict = connection.settings_dict
        saved = {key: settings_dict[key] for key in ("HOST", "PORT")}
        settings_dict.update(HOST="127.0.0.1", PORT=str(listener.getsockname()[1]))
        # Only new connections go there: the probe's kept one must be new too.
        probe_connection.close()
        database_probe.forget()
        try:
            yield
        finally:
            settings_dict.update(saved)


def wait_until_healthy(client: ApiClient) -> None:
    """A probe still hanging from the test would otherwise answer the next test's check."""
    wait_until(lambda: client.get("/healthz").status_code == 200, timeout=10)


@pytest.mark.parametrize("path", ["/healthz", "/healthz/", "/healthz?probe=platform"])
def test_healthz__get_with_database_up__200_ok(anonymous_client, path):
    response = anonymous_client.get(path)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == OK
    assert response["Cache-Control"] == "no-store"
    assert int(response["Content-Length"]) == len(response.content)


def test_healthz__head__200_headers_without_body(anonymous_client):
    get = anonymous_client.get("/healthz")

    response = anonymous_client.head("/healthz")

    assert response.status_code == 200
    assert response.content == b""
    assert response["Cache-Control"] == "no-store"
    assert response["Content-Length"] == get["Content-Length"]


@pytest.mark.parametrize("headers", [{}, {"HTTP_AUTHORIZATION": "Bearer not-a-token"}, {"HTTP_AUTHENTICATION": "x"}])
def test_healthz__no_or_invalid_token__still_200(anonymous_client, headers):
    response = anonymous_client.get("/healthz", **headers)

    assert response.status_code == 200
    assert response.json() == OK


def test_healthz__host_not_in_allowed_hosts__still_200(anonymous_client):
    # Platforms probe with the container's address as Host; the check runs before host validation.
    response = anonymous_client.get("/healthz", HTTP_HOST="10.1.2.3:8000")

    assert response.status_code == 200
    assert anonymous_client.get("/id-link", HTTP_HOST="10.1.2.3:8000").status_code == 400


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "options"])
def test_healthz__other_methods__405_problem(anonymous_client, method):
    response = getattr(anonymous_client, method)("/healthz", data="{}", content_type="application/json")

    assert response.status_code == 405
    assert response["Content-Type"] == PROBLEM_CONTENT_TYPE
    assert response["Allow"] == "GET, HEAD"
    body = response.json()
    assert body["code"] == "method_not_allowed"
    assert body["status"] == 405


def test_healthz__database_unreachable__503_unavailable_then_200_when_back(anonymous_client):
    # Given
    with database_unreachable():
        started = time.monotonic()

        # When
        response = anonymous_client.get("/healthz")

        # Then: the fixed body, nothing about why
        assert time.monotonic() - started < 3
        assert response.status_code == 503
        assert response["Content-Type"] == "application/json"
        assert response.json() == UNAVAILABLE
        assert response["Cache-Control"] == "no-store"
        assert anonymous_client.head("/healthz").status_code == 503

    assert anonymous_client.get("/healthz").status_code == 200


@pytest.mark.postgres
def test_healthz__database_accepts_but_never_answers__503_within_3_seconds(anonymous_client):
    with silent_database():
        # When: a check, and another while the first one's probe still hangs
        timings = []
        for _ in range(2):
            started = time.monotonic()
            response = anonymous_client.get("/healthz")
            timings.append(time.monotonic() - started)

            # Then
            assert response.status_code == 503
            assert response.json() == UNAVAILABLE

    # The first waited for its full 2 s budget; the second shared the hanging probe.
    assert 1.9 < timings[0] < 3
    assert timings[1] < 3
    wait_until_healthy(anonymous_client)


class BlockedQuery:
    """A probe's query that blocks until `release` is set (5 s at most), noting each call in `calls`."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.release = threading.Event()

    def __call__(self) -> None:
        self.calls.append(1)
        self.release.wait(5)


@pytest.fixture
def blocked_query() -> Iterator[BlockedQuery]:
    """A BlockedQuery, released when the test ends whatever happened."""
    query = BlockedQuery()
    yield query
    query.release.set()


def test_database_probe__concurrent_checks__share_one_probe(blocked_query):
    # Given: a probe whose query blocks until released
    probe = DatabaseProbe(blocked_query)
    answers = []
    checks = [threading.Thread(target=lambda: answers.append(probe.database_ok(timeout=5))) for _ in range(8)]

    # When
    for check in checks:
        check.start()
    time.sleep(0.2)
    blocked_query.release.set()
    for check in checks:
        check.join(5)

    # Then
    assert blocked_query.calls == [1]
    assert answers == [True] * 8


def test_database_probe__query_hangs__false_after_timeout_and_no_second_thread(blocked_query):
    probe = DatabaseProbe(blocked_query)

    started = time.monotonic()
    assert probe.database_ok(timeout=0.3) is False
    assert probe.database_ok(timeout=0.3) is False
    assert 0.6 <= time.monotonic() - started < 1.5
    assert blocked_query.calls == [1]


def test_database_probe__query_fails__false_at_once_then_fresh_probe_next_time():
    outcomes = iter([RuntimeError("down"), None])

    def query() -> None:
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome

    probe = DatabaseProbe(query)

    assert probe.database_ok(timeout=2) is False
    assert probe.database_ok(timeout=2) is True


def test_database_probe__probe_hung_past_abandon_time__replaced_up_to_the_cap(blocked_query):
    # Given: every query hangs; probes are given up after 0.2 s, at most 2 at a time
    probe = DatabaseProbe(blocked_query, abandon_after=0.2, max_abandoned=2)

    # When: checks keep coming while the database hangs
    for _ in range(6):
        probe.database_ok(timeout=0.25)

    # Then: the first probe plus two replacements, no more threads than that
    assert len(blocked_query.calls) == 3


def test_database_unavailable_middleware__failure_inside_another_middleware__503_problem(db):
    # Given: a middleware that opens a connection to the unreachable database, as
    # SessionMiddleware does when it saves a session, wrapped as Django wraps every middleware
    def opens_a_connection(request):
        connections.create_connection("default").ensure_connection()

    handler = DatabaseUnavailableMiddleware(convert_exception_to_response(opens_a_connection))

    # When
    with database_unreachable():
        response = handler(RequestFactory().get("/admin/"))

    # Then
    assert response.status_code == 503
    assert response["Content-Type"] == PROBLEM_CONTENT_TYPE
    assert response["Retry-After"].isdigit()
    assert json.loads(response.content)["code"] == "database_unavailable"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_database_unavailable_middleware__admin_page_while_database_down__503_then_recovers(admin_client):
    # Given: a signed-in staff member, and then the database goes away
    assert admin_client.get("/admin/").status_code == 200
    with database_unreachable():
        connection.close()

        # When: the admin (a plain Django view, not DRF) loads the session
        response = admin_client.get("/admin/")

        # Then
        assert response.status_code == 503
        assert response["Content-Type"] == PROBLEM_CONTENT_TYPE
        assert response["Retry-After"].isdigit()
        assert response.json()["code"] == "database_unavailable"

    assert admin_client.get("/admin/").status_code == 200


def counting_connect(opened: list):
    def connect():
        raw = connection_open()
        opened.append(raw)
        return raw

    return connect


@pytest.mark.postgres
def test_probe_connection__successive_probes__one_connection_kept(db):
    # Given
    opened = []
    probe = ProbeConnection(counting_connect(opened))

    # When
    for _ in range(5):
        probe.query()

    # Then: PostgreSQL forked one backend, not one per probe
    assert len(opened) == 1
    probe.close()
    assert opened[0].closed


@pytest.mark.postgres
def test_probe_connection__kept_connection_ended__next_probe_succeeds_on_a_new_one(db):
    # Given: a kept connection whose backend is ended (a restart, an idle timeout)
    opened = []
    probe = ProbeConnection(counting_connect(opened))
    probe.query()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [opened[0].info.backend_pid])

    # When / Then: no false alarm, and the new connection is the one kept
    probe.query()
    assert len(opened) == 2
    probe.query()
    assert len(opened) == 2
    probe.close()


def test_probe_connection__database_down__raises_and_keeps_nothing(db):
    opened = []
    probe = ProbeConnection(counting_connect(opened))
    probe.query()
    probe.close()

    # The driver's own error: the probe works below Django's connection wrapper.
    with database_unreachable(), pytest.raises((psycopg.Error, sqlite3.Error)):
        probe.query()

    probe.query()
    assert len(opened) == 2
    probe.close()


def test_database_probe__success__trusted_for_the_reuse_window_only():
    # Given
    calls = []
    probe = DatabaseProbe(lambda: calls.append(1), reuse_success_for=0.3)

    # When / Then: checks right after a success share it
    assert probe.database_ok(timeout=2) is True
    assert probe.database_ok(timeout=2) is True
    assert calls == [1]

    # And once it is older than the window, the next check probes again
    time.sleep(0.35)
    assert probe.database_ok(timeout=2) is True
    assert calls == [1, 1]


def test_database_probe__forget__next_check_probes_at_once():
    calls = []
    probe = DatabaseProbe(lambda: calls.append(1))
    probe.database_ok(timeout=2)

    probe.forget()
    probe.database_ok(timeout=2)

    assert calls == [1, 1]
