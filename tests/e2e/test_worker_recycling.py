"""A worker recycled after max_requests loses no request: the keep-alive connections it holds are answered
until their clients go elsewhere (deploy/workers.py, "Recycling")."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.helpers.server import gunicorn, wait_until

pytestmark = pytest.mark.e2e

CLIENTS, REQUESTS = 8, 400


def requests_failed(base_url: str) -> list[str]:
    """REQUESTS requests on one keep-alive client; what failed to get an answer."""
    failed = []
    with httpx.Client(base_url=base_url, timeout=10) as client:
        for _ in range(REQUESTS):
            try:
                client.get("/no-such-path")
            except httpx.TransportError as exc:
                failed.append(repr(exc))
    return failed


def test_workers_recycled_every_few_hundred_requests__no_request_lost(tmp_path):
    # Given: workers replaced after 100 requests each (the database is a SQLite file: no path here reads it)
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "SECRET_KEY": "e2e-recycling-not-secret",
        "GUNICORN_MAX_REQUESTS": "100",
        "GUNICORN_MAX_REQUESTS_JITTER": "0",
    }
    with gunicorn(env=env, workers=2) as (base_url, _):
        wait_until(lambda: httpx.get(f"{base_url}/no-such-path").status_code == 404, timeout=15)

        # When: clients keep their connections busy through a dozen or more recyclings
        with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
            failures = [failure for failed in pool.map(requests_failed, [base_url] * CLIENTS) for failure in failed]

    # Then
    assert failures == []
