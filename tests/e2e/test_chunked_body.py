"""A body sent with Transfer-Encoding: chunked and no Content-Length reaches the API whole, through gunicorn."""

from __future__ import annotations

import json

import httpx
import pytest
from django.conf import settings

from tests.helpers.resources import DEMO_YAML, apply_yaml
from tests.helpers.server import database_url_for_tests, gunicorn, wait_until
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def chunks(body: bytes, size: int = 7):
    """A generator body: httpx then sends it chunked, without Content-Length, as streaming clients do."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_chunked_body__valid_and_oversized__assigned_and_413():
    apply_yaml(DEMO_YAML)
    _, token = api_token_create(name="chunked")
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": "e2e-chunked-not-secret"}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with gunicorn(env=env, workers=1) as (base_url, _), httpx.Client(base_url=base_url) as http:
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)
        body = json.dumps({"experiment_id": "checkout-button", "subject_ids": ["u-1", "u-2"]}).encode()

        # When a valid body arrives in chunks with no length
        request = http.build_request("POST", "/experiment-assignments", headers=headers, content=chunks(body))
        assert request.headers["transfer-encoding"] == "chunked" and "content-length" not in request.headers
        answered = http.send(request)

        # Then it is read whole and answered like any other
        assert answered.status_code == 200, answered.text
        assert set(answered.json()["assignments"]) == {"u-1", "u-2"}

        # And one over the body size limit is refused 413, as a declared one is
        oversized = b" " * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + body
        refused = http.post("/experiment-assignments", headers=headers, content=chunks(oversized, 65536))
        assert refused.status_code == 413
        assert refused.json()["code"] == "payload_too_large"
