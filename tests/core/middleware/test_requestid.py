"""core/middleware/requestid.py: the request ID comes in as X-Request-ID (or is made), goes out in the response header,
in every problem body and on every log line of the request."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient

from core.healthz import database_probe, probe_connection
from core.middleware.requestid import request_id_accept
from tests.helpers.database import database_unreachable
from tests.helpers.observability import captured_logs, json_lines

MADE = re.compile(r"[0-9a-f]{32}")
BODY = {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}

# The count of a failure held back (core/observability/logfilters.py) is written by a timer, up to 10 s later, into
# whichever capture is open then: it belongs to an earlier test's requests, not to this one.
REPEAT_SUMMARY = re.compile(r" \[and \d+ more like this in \d+ s\]$")


def request_own_lines(text: str) -> list[dict]:
    return [line for line in json_lines(text) if not REPEAT_SUMMARY.search(line["message"])]


@pytest.fixture(autouse=True)
def _probe_connection_closed():
    """/healthz keeps a connection of its own open: closed, so the test database can be dropped."""
    yield
    probe_connection.close()
    database_probe.forget()


@pytest.mark.parametrize(
    "presented",
    ["4bf92f3577b34da6a3ce929d0e0e4736", "req-1", "a" * 128, "Root=1-5759e988:bd862e3f/x+y@z_w.v"],
)
def test_request_id_accept__safe_id__kept(presented):
    assert request_id_accept(presented) == presented


@pytest.mark.parametrize(
    "presented",
    [None, "", "a" * 129, "has space", 'quote"d', "back\\slash", "new\nline", "semi;colon", "é", "<script>"],
)
def test_request_id_accept__missing_or_unsafe__a_new_one(presented):
    assert MADE.fullmatch(request_id_accept(presented))


def test_request__id_sent__same_id_in_the_header_the_problem_and_the_log_line(anonymous_api):
    # Given a request with an ID of the client's, and no token
    with captured_logs() as logs:
        response = anonymous_api.post("/experiment-assignments", BODY, HTTP_X_REQUEST_ID="client-req-7")

    # Then the answer, its problem body and the request's log line carry that ID
    assert response.status_code == 401
    assert response["X-Request-ID"] == "client-req-7"
    assert json.loads(response.content)["request_id"] == "client-req-7"
    lines = request_own_lines(logs.getvalue())
    assert {line["logger"] for line in lines} == {"config.requestlog", "django.request"}
    assert {line["request_id"] for line in lines} == {"client-req-7"}


def test_request__bad_id_sent__replaced_by_a_new_one_everywhere(anonymous_api):
    # Given an ID too long to keep
    with captured_logs() as logs:
        response = anonymous_api.post("/experiment-assignments", BODY, HTTP_X_REQUEST_ID="x" * 500)

    # Then a new one is used, the same in the header, the body and the log lines; the bad one is nowhere
    made = response["X-Request-ID"]
    assert MADE.fullmatch(made)
    assert json.loads(response.content)["request_id"] == made
    lines = request_own_lines(logs.getvalue())
    assert {line["logger"] for line in lines} == {"config.requestlog", "django.request"}
    assert {line["request_id"] for line in lines} == {made}
    assert "x" * 500 not in logs.getvalue()


def test_request__no_id_sent__each_request_its_own(anonymous_api):
    first, second = anonymous_api.get("/healthz"), anonymous_api.get("/healthz")

    assert MADE.fullmatch(first["X-Request-ID"])
    assert MADE.fullmatch(second["X-Request-ID"])
    assert first["X-Request-ID"] != second["X-Request-ID"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("get", "/no-such-path", 404),
        ("post", "/healthz", 405),
        ("get", "/experiment-assignments", 401),
        ("get", "/metrics", 401),
    ],
)
def test_problem__answered_anywhere__carries_the_request_id(anonymous_api, method, path, status):
    response = getattr(anonymous_api, method)(path, HTTP_X_REQUEST_ID=f"id-{status}")

    assert response.status_code == status
    assert response["Content-Type"] == "application/problem+json"
    assert json.loads(response.content)["request_id"] == f"id-{status}"
    assert response["X-Request-ID"] == f"id-{status}"


def test_payload_too_large__problem_carries_the_request_id(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10

    response = api.post("/experiment-assignments", BODY, HTTP_X_REQUEST_ID="big-1")

    assert response.status_code == 413
    assert json.loads(response.content)["request_id"] == "big-1"


def test_invalid_request__problem_with_errors_and_the_request_id(api):
    response = api.post("/experiment-assignments", {"experiment_id": "checkout-button"}, HTTP_X_REQUEST_ID="v-1")

    body = json.loads(response.content)
    assert body["code"] == "invalid_request"
    assert [error["field"] for error in body["errors"]] == ["subject_ids"]
    assert body["request_id"] == "v-1"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_database_down__503_problem_and_the_warning_line_carry_the_request_id(api, demo_config):
    # Given the database gone while a request is answered
    with captured_logs() as logs, database_unreachable():
        connection.close()
        response = api.post("/experiment-assignments", BODY, HTTP_X_REQUEST_ID="outage-1")

    # Then the problem and every line logged meanwhile, the warning as well as the request's, name it
    assert response.status_code == 503
    assert json.loads(response.content)["request_id"] == "outage-1"
    lines = request_own_lines(logs.getvalue())
    assert {line["logger"] for line in lines} >= {"config.exceptions", "config.requestlog"}
    assert {line["request_id"] for line in lines} == {"outage-1"}


def test_asgi_request__id_sent__kept_as_under_wsgi(db):
    # Django's ASGI handler (config.asgi-style serving) starts a request with its scope, not an environ.
    response = async_to_sync(AsyncClient().get)("/no-such-path", headers={"X-Request-ID": "asgi-7"})

    assert response.status_code == 404
    assert response["X-Request-ID"] == "asgi-7"
    assert json.loads(response.content)["request_id"] == "asgi-7"
