"""A database outage seen from outside: real gunicorn, its own PostgreSQL cluster stopped and started.

The cluster is private to this module (devtools/cluster.py, the fixtures in tests/e2e/conftest.py), so
stopping it disturbs nobody else's tests.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from core.healthz import PROBE_REUSE_SECONDS
from tests.helpers.api import PROBLEM_CONTENT_TYPE
from tests.helpers.server import gunicorn, gunicorn_log, silent_server, wait_until
from tokens.crypto import token_generate

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

SECRET_KEY = "e2e-database-outage-not-secret"
FLAG = "/ofrep/v1/evaluate/flags/checkout-button"


def timed(call):
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def assert_database_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == PROBLEM_CONTENT_TYPE
    assert response.headers["retry-after"].isdigit()
    body = response.json()
    assert body["code"] == "database_unavailable"
    assert body["status"] == 503
    assert "Traceback" not in response.text and "psycopg" not in response.text


def test_database_outage__cluster_stopped_then_started__503_then_recovers_without_restart(
    cluster, service_env, proxy_token
):
    assign_body = {"experiment_id": "checkout-button", "subject_ids": ["u-1", "u-2"]}
    link_body = {
        "identifiers": [{"subject_type": "cookie", "subject_id": "c-1"}, {"subject_type": "user", "subject_id": "u-1"}]
    }
    flag_body = {"context": {"targetingKey": "u-1"}}
    flags_body = {"context": {"targetingKey": "u-1", "subjectType": "user"}}
    auth = {"Authorization": f"Bearer {proxy_token}"}

    with (
        gunicorn(env=service_env, workers=2) as (base_url, server),
        httpx.Client(base_url=base_url, timeout=15) as http,
    ):
        # Given: a healthy service that has made assignments, every worker holding a connection
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
        before = http.post("/experiment-assignments", json=assign_body, headers=auth)
        assert before.status_code == 200
        for _ in range(4):
            assert http.post("/experiment-assignments", json=assign_body, headers=auth).json() == before.json()

        # When: the database stops
        cluster.stop()
        stopped_at = time.monotonic()

        # Then: once a worker's last success is older than it trusts one for, the health check
        # probes and says so, without detail, within 3 seconds of the stop
        time.sleep(PROBE_REUSE_SECONDS)
        response = http.get("/healthz")
        assert response.status_code == 503
        assert response.json() == {"status": "unavailable", "database": "unavailable"}
        assert response.headers["cache-control"] == "no-store"
        assert time.monotonic() - stopped_at < 3
        assert http.head("/healthz").status_code == 503

        # And every endpoint answers 503 problem+json, on every worker
        for _ in range(4):
            assert_database_unavailable(http.post("/experiment-assignments", json=assign_body, headers=auth))
            assert_database_unavailable(http.post("/id-link", json=link_body, headers=auth))
            # OpenFeature's paths: the same 503, with OFREP's members.
            flag = http.post(FLAG, json=flag_body, headers=auth)
            assert_database_unavailable(flag)
            assert (flag.json()["errorCode"], flag.json()["key"]) == ("GENERAL", "checkout-button")
            flags = http.post("/ofrep/v1/evaluate/flags", json=flags_body, headers=auth)
            assert_database_unavailable(flags)
            assert flags.json()["errorCode"] == "GENERAL"
            # A plain Django view: the admin loads the session from the database.
            assert_database_unavailable(http.get("/admin/", headers={"Cookie": "sessionid=" + "x" * 32}))

        # When: the database comes back
        cluster.start()

        # Then: the same server recovers by itself, and stored assignments are as they were
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
        for _ in range(4):
            response = http.post("/experiment-assignments", json=assign_body, headers=auth)
            assert response.status_code == 200, response.text
            assert response.json() == before.json()
        assert http.post("/id-link", json=link_body, headers=auth).json() == {"success": True}
        assert http.post(FLAG, json=flag_body, headers=auth).json()["variant"] == before.json()["assignments"]["u-1"]
        assert server.poll() is None


def test_database_outage__database_accepts_but_never_answers__503_within_3_seconds():
    with silent_server() as port:
        env = {"DATABASE_URL": f"postgres://root@127.0.0.1:{port}/service", "SECRET_KEY": SECRET_KEY}
        with gunicorn(env=env, workers=1) as (base_url, _), httpx.Client(base_url=base_url, timeout=15) as http:
            # A worker is up once a path that needs no database answers.
            wait_until(lambda: http.get("/no-such-path").status_code == 404, timeout=15)

            # When / Then: the check gives up on the hanging database within its budget
            for _ in range(2):
                response, elapsed = timed(lambda: http.get("/healthz"))
                assert response.status_code == 503
                assert response.json() == {"status": "unavailable", "database": "unavailable"}
                assert elapsed < 3

            # And an API request fails with 503 once connect_timeout (3 s) expires, not hang
            response, elapsed = timed(
                lambda: http.post(
                    "/experiment-assignments",
                    json={"experiment_id": "checkout-button", "subject_ids": ["u-1"]},
                    # Well formed, so that authentication has to ask the database about it.
                    headers={"Authorization": f"Bearer {token_generate()[1]}"},
                )
            )
            assert_database_unavailable(response)
            assert elapsed < 6


def test_database_outage__twelve_seconds_under_load__a_few_log_lines_with_counts(cluster, service_env, proxy_token):
    body = {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}
    auth = {"Authorization": f"Bearer {proxy_token}"}
    # Without the access log, which writes a line per request by design: the failures' own lines are counted.
    env = {**service_env, "GUNICORN_ACCESS_LOG": "false"}
    with gunicorn(env=env, workers=2) as (base_url, _):
        log_path = gunicorn_log(base_url)
        with httpx.Client(base_url=base_url, timeout=15) as http:
            wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
            assert http.post("/experiment-assignments", json=body, headers=auth).status_code == 200
        lines_before = len(log_path.read_text().splitlines())

        # Given: clients that keep asking, as product backends do
        stop = threading.Event()
        statuses: list[int] = []

        def keep_asking() -> None:
            with httpx.Client(base_url=base_url, timeout=15) as client:
                while not stop.is_set():
                    statuses.append(client.post("/experiment-assignments", json=body, headers=auth).status_code)
                    client.get("/healthz")

        clients = [threading.Thread(target=keep_asking) for _ in range(4)]
        # When: the database is away for 12 s, longer than the 10 s over which repeats are summarised
        cluster.stop()
        try:
            for client in clients:
                client.start()
            time.sleep(12)
        finally:
            stop.set()
            for client in clients:
                client.join(30)
            cluster.start()
        # Without the service's line per request too, which is there by design, as the access log's is.
        outage_lines = [
            line
            for line in log_path.read_text().splitlines()[lines_before:]
            if '"logger":"config.requestlog"' not in line
        ]

    # Then: hundreds of failed requests, a few dozen lines at most, and the counts of those held back
    assert statuses.count(503) >= 200
    assert set(statuses) == {503}
    assert len(outage_lines) <= 40, "\n".join(outage_lines)
    assert any("more like this" in line for line in outage_lines), "\n".join(outage_lines)
    assert not any(line.startswith(("Traceback", "  File")) for line in outage_lines)
