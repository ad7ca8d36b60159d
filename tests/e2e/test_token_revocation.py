"""A revoked token stops working on a running server within API_TOKEN_CACHE_SECONDS, and no log holds it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from django.conf import settings

from tests.helpers import PROJECT_DIR
from tests.helpers.database import all_table_text
from tests.helpers.resources import DEMO_YAML, apply_yaml
from tests.helpers.server import database_url_for_tests, gunicorn, gunicorn_log, wait_until
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-token-revocation-not-secret"
BODY = {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}
# Slack over API_TOKEN_CACHE_SECONDS for the poll interval and a slow machine.
MARGIN_SECONDS = 2.0


def test_revocation__revoke_command_on_a_running_server__refused_within_the_cache_time_and_never_logged():
    # Given a running server with two workers, both of which have verified (and cached) the token
    apply_yaml(DEMO_YAML)
    _, token = api_token_create(name="backend")
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": SECRET_KEY}
    with gunicorn(env=env, workers=2) as (base_url, _), httpx.Client(base_url=base_url) as http:
        headers = {"Authorization": f"Bearer {token}"}
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
        for _ in range(20):
            assert http.post("/experiment-assignments", json=BODY, headers=headers).status_code == 200

        # When the token is revoked with the command, from another process
        revoke = subprocess.run(
            [sys.executable, "manage.py", "revoke_api_token", "--name", "backend"],
            cwd=PROJECT_DIR,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        revoked_at = time.monotonic()
        assert revoke.returncode == 0, revoke.stderr

        # Then every worker refuses it within API_TOKEN_CACHE_SECONDS
        def refused_everywhere() -> bool:
            return all(
                http.post("/experiment-assignments", json=BODY, headers=headers).status_code == 401 for _ in range(6)
            )

        wait_until(refused_everywhere, timeout=settings.API_TOKEN_CACHE_SECONDS + MARGIN_SECONDS, interval=0.2)
        assert time.monotonic() - revoked_at <= settings.API_TOKEN_CACHE_SECONDS + MARGIN_SECONDS
        refused = http.post("/experiment-assignments", json=BODY, headers=headers)
        assert refused.json()["code"] == "not_authenticated"
        assert refused.headers["www-authenticate"] == "Bearer"
        log_path = gunicorn_log(base_url)

    # And the server's log (access log included) recorded the requests, but never the token
    log = log_path.read_text()
    assert '"POST /experiment-assignments HTTP/1.1" 200' in log
    assert '"POST /experiment-assignments HTTP/1.1" 401' in log
    assert token not in log and token.partition(".")[2] not in log
    # Nor does any table
    text = all_table_text()
    assert token not in text and token.partition(".")[2] not in text
