"""A blocked or slow database seen from outside: every request answers within its bound, /healthz keeps
answering while every API thread waits, and gunicorn's own refusals are problem+json."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from assignments.models import Assignment
from tests.helpers.api import PROBLEM_CONTENT_TYPE
from tests.helpers.resources import DEMO_YAML, apply_yaml
from tests.helpers.server import database_url_for_tests, gunicorn, wait_until
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-slow-database-not-secret"
# The bound the service promises for a request blocked by the database (docs/how-to/operate.md).
REQUEST_BOUND_SECONDS = 10
HEALTHZ_BOUND_SECONDS = 3
WORKERS, THREADS = 2, 2  # THREADS: DATABASE_POOL_SIZE, the requests a worker works on at once


@pytest.fixture
def token() -> str:
    apply_yaml(DEMO_YAML)
    return api_token_create(name="backend")[1]


@contextlib.contextmanager
def service(**settings: str) -> Iterator[str]:
    env = {
        "DATABASE_URL": database_url_for_tests(),
        "SECRET_KEY": SECRET_KEY,
        "DATABASE_POOL_SIZE": str(THREADS),
        **settings,
    }
    with gunicorn(env=env, workers=WORKERS) as (base_url, _):
        wait_until(lambda: httpx.get(f"{base_url}/healthz").status_code == 200, timeout=15)
        yield base_url


@contextlib.contextmanager
def assignments_locked() -> Iterator[None]:
    """What a migration or a VACUUM FULL does: an ACCESS EXCLUSIVE lock on the assignments table,
    held by another session until the block ends."""
    with psycopg.connect(database_url_for_tests()) as holder:
        holder.execute("LOCK TABLE assignments_assignment IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            holder.rollback()


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def assign(base_url: str, token: str, subject_id: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/experiment-assignments",
        json={"experiment_id": "checkout-button", "subject_ids": [subject_id]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )


def assert_database_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == PROBLEM_CONTENT_TYPE
    assert response.headers["retry-after"].isdigit()
    assert response.json()["code"] == "database_unavailable"
    assert response.json()["detail"] == "The database did not answer in time; retry later."


def test_lock_held__new_subjects_503_within_the_bound__healthz_answers_while_every_thread_waits(token):
    with service() as base_url:
        # Given: both workers warm (token and experiment cached)
        for number in range(4):
            assert assign(base_url, token, f"warm-{number}").status_code == 200

        with assignments_locked(), ThreadPoolExecutor(max_workers=2 * WORKERS * THREADS) as pool:
            # When: more requests for new subjects than the server has threads, all blocked by the lock
            pending = [
                pool.submit(timed, lambda number=number: assign(base_url, token, f"blocked-{number}"))
                for number in range(2 * WORKERS * THREADS)
            ]
            time.sleep(0.5)

            # Then: the health check is answered meanwhile, and says the database answers
            health, health_seconds = timed(lambda: httpx.get(f"{base_url}/healthz", timeout=10))
            assert health.status_code == 200
            assert health_seconds < HEALTHZ_BOUND_SECONDS

            # And every blocked request gets its 503 within the bound, not a hang or a 500
            for future in pending:
                response, seconds = future.result()
                assert_database_unavailable(response)
                assert seconds < REQUEST_BOUND_SECONDS

        # Nothing was stored meanwhile, and the same server serves again at once
        assert not Assignment.objects.filter(subject_id__startswith="blocked-").exists()
        assert assign(base_url, token, "blocked-0").status_code == 200


def test_statement_runs_past_the_statement_timeout__503_soon_after_it(token):
    # Given: no lock timeout, so the blocked statement runs until the statement timeout stops it
    with service(DATABASE_LOCK_TIMEOUT_MS="0", DATABASE_STATEMENT_TIMEOUT_MS="1000") as base_url:
        assert assign(base_url, token, "warm").status_code == 200

        # When
        with assignments_locked():
            response, seconds = timed(lambda: assign(base_url, token, "slow-1"))

        # Then
        assert_database_unavailable(response)
        assert 1 <= seconds < 3


def raw_request(base_url: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are (no client library would send these) and read the whole answer."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(150)) + b"\r\n", 431),
        (b"THIS IS NOT HTTP\r\n\r\n", 400),
        (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    ],
    ids=["header-too-large", "too-many-headers", "bad-request-line", "request-line-too-long"],
)
def test_request_refused_by_gunicorn__problem_json(token, data, status):
    with service() as base_url:
        answer_status, headers, body = raw_request(base_url, data)

    assert answer_status == status
    assert headers["content-type"] == PROBLEM_CONTENT_TYPE
    problem = httpx.Response(status, content=body).json()
    assert problem["status"] == status
    assert problem["code"] == "invalid_request"
    assert "<html" not in body.decode()
    # The request's own ID was never read: the refusal carries one of its own, in the body and the header
    assert headers["x-request-id"] == problem["request_id"]
