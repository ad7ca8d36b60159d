"""GET /metrics on a real gunicorn with two workers: each worker counts into its own files, a scrape of either
adds them up, a stopped worker's counts stay in the sum, and a new server starts from zero. Its log: a JSON
line per request, with the request's ID, and never a token."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from core.observability.metricsfiles import FOLDED_KINDS
from tests.helpers.observability import request_lines, sample, samples
from tests.helpers.resources import DEMO_YAML, apply_yaml
from tests.helpers.server import database_url_for_tests, gunicorn, gunicorn_log, wait_until, worker_pids
from tokens.models import Role
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-metrics-not-secret"
ASSIGNED = {"endpoint": "experiment-assignments", "method": "POST", "status": "200"}


def assigned_in_files(directory: Path) -> dict[str, float]:
    """POST /experiment-assignments 200 counted in each counter file of the directory, by file name."""
    counts = {}
    for path in sorted(directory.glob("counter_*.db")):
        counts[path.name] = sum(
            value
            for key, value, _, _ in MmapedDict.read_all_values_from_file(str(path))
            if json.loads(key)[1] == "http_requests_total" and json.loads(key)[2] == ASSIGNED
        )
    return counts


def stale_count(directory: Path) -> None:
    """A count an earlier server left in the directory (pid 1 is never a worker here)."""
    stale = MmapedDict(str(directory / "counter_1.db"))
    key = mmap_key(
        "http_requests", "http_requests_total", list(ASSIGNED), list(ASSIGNED.values()), "an earlier server's"
    )
    stale.write_value(key, 1000.0, 0.0)
    stale.close()


def test_metrics__two_workers__both_count_a_scrape_adds_them_up_and_a_stopped_one_stays_in_the_sum(tmp_path):
    # Given a server with two workers counting into a directory where an earlier server left counts
    apply_yaml(DEMO_YAML)
    _, proxy_token = api_token_create(name="e2e-backend", role=Role.PROXY)
    _, admin_token = api_token_create(name="e2e-scraper", role=Role.ADMIN)
    directory = tmp_path / "metrics"
    directory.mkdir()
    stale_count(directory)
    env = {
        "DATABASE_URL": database_url_for_tests(),
        "SECRET_KEY": SECRET_KEY,
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
    }
    admin = {"Authorization": f"Bearer {admin_token}"}
    proxy = {"Authorization": f"Bearer {proxy_token}"}
    with gunicorn(env=env, workers=2) as (base_url, process):
        log_path = gunicorn_log(base_url)
        wait_until(lambda: httpx.get(f"{base_url}/healthz").status_code == 200, timeout=15)
        assert "counter_1.db" not in {path.name for path in directory.iterdir()}
        # /healthz may be answered by the first worker before the second has started
        wait_until(lambda: len(worker_pids(process.pid)) == 2, timeout=15)
        workers = worker_pids(process.pid)

        # When clients on connections of their own send requests until both workers have answered some
        sent = []

        def send_batch() -> None:
            def one(number: int) -> None:
                with httpx.Client(base_url=base_url) as http:
                    body = {"experiment_id": "checkout-button", "subject_ids": [f"m-{len(sent)}-{number}"]}
                    response = http.post("/experiment-assignments", json=body, headers=proxy)
                    sent.append(response.status_code)

            threads = [threading.Thread(target=one, args=(number,)) for number in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)

        def both_counted() -> bool:
            send_batch()
            per_file = assigned_in_files(directory)
            return all(per_file.get(f"counter_{pid}.db", 0) > 0 for pid in workers)

        wait_until(both_counted, timeout=60, interval=0)
        assert set(sent) == {200}
        per_worker = assigned_in_files(directory)

        # Then a scrape of either worker gives the sum of both, which is every request sent
        scraped = samples(httpx.get(f"{base_url}/metrics", headers=admin).text)
        assert sample(scraped, "http_requests_total", **ASSIGNED) == sum(per_worker.values()) == len(sent)
        assert sample(scraped, "assignments_created_total", experiment="checkout-button", source="hashed") == len(sent)
        assert sample(scraped, "http_request_duration_seconds_count", endpoint="experiment-assignments") == len(sent)
        assert sample(scraped, "healthz_database_up") == 1

        # And without an admin token there is nothing to read
        assert httpx.get(f"{base_url}/metrics").status_code == 401
        refused = httpx.get(f"{base_url}/metrics", headers=proxy)
        assert (refused.status_code, refused.json()["code"]) == (403, "permission_denied")

        # When one worker stops (as a recycled one does) and gunicorn replaces it
        stopped = min(workers)
        os.kill(stopped, signal.SIGTERM)
        wait_until(lambda: not (directory / f"counter_{stopped}.db").exists(), timeout=30)
        wait_until(lambda: len(worker_pids(process.pid) - workers) == 1, timeout=30)

        # Then its counts are folded into one file and stay in the sum; its live gauge is gone
        names = {path.name for path in directory.iterdir()}
        assert {f"{kind}_folded.db" for kind in FOLDED_KINDS} <= names
        assert not any(str(stopped) in name for name in names)
        rescraped = samples(httpx.get(f"{base_url}/metrics", headers=admin).text)
        assert sample(rescraped, "http_requests_total", **ASSIGNED) == len(sent)
        assert sample(rescraped, "http_request_duration_seconds_count", endpoint="experiment-assignments") == len(sent)

        # And the request log has a JSON line per request with the request's ID
        traced = httpx.post(
            f"{base_url}/experiment-assignments",
            json={"experiment_id": "checkout-button", "subject_ids": ["traced-1", "traced-2"]},
            headers={**proxy, "X-Request-ID": "e2e-trace-1"},
        )
        assert traced.headers["x-request-id"] == "e2e-trace-1"
        wait_until(lambda: "e2e-trace-1" in log_path.read_text(), timeout=5)

    log = log_path.read_text()
    (line,) = [line for line in request_lines(log) if line["request_id"] == "e2e-trace-1"]
    assert (line["method"], line["path"], line["status"]) == ("POST", "/experiment-assignments", 200)
    assert (line["experiment"], line["batch_size"], line["token_name"]) == ("checkout-button", 2, "e2e-backend")
    assert len([line for line in request_lines(log) if line["path"] == "/experiment-assignments"]) == len(sent) + 1
    # Neither token, nor its secret part, anywhere in the server's output
    for token in (proxy_token, admin_token):
        assert token not in log and token.partition(".")[2] not in log
