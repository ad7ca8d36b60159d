"""A component of links built to be costly, asked for through the real server: the answer comes within the
web server's statement timeout, with the variant carried over, instead of holding a worker thread for
the time of 599 walks of 180,000 neighbour visits each (about 50 s, unbounded by any timeout)."""

from __future__ import annotations

import time

import httpx
import pytest
from django.conf import settings

from assignments.models import Assignment
from tests.helpers.assignments import assigned_store
from tests.helpers.idlinks import component_store
from tests.helpers.resources import BANNER_FOLLOWING_LINKS, apply_resources
from tests.helpers.server import database_url_for_tests, gunicorn, wait_until
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-link-walk-bounds-not-secret"
SIDE = 300


def test_link_walk__599_new_subjects_in_a_300_by_300_component__answered_within_the_statement_timeout():
    # Given a component of 90,000 links, 300 cookies each linked to each of 300 others, one of them assigned
    apply_resources(*BANNER_FOLLOWING_LINKS)
    component_store(SIDE)
    assigned_store("banner", "a000", "green")
    batch = [f"a{i:03d}" for i in range(1, SIDE)] + [f"b{j:03d}" for j in range(SIDE)]
    _, token = api_token_create(name="walker")
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": SECRET_KEY}
    with (
        gunicorn(env=env, workers=1) as (base_url, _),
        httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
    ):
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)

        # When the 599 others are asked for in one request
        started = time.monotonic()
        response = http.post("/experiment-assignments", json={"experiment_id": "banner", "subject_ids": batch})
        seconds = time.monotonic() - started

    # Then they all get the assigned cookie's variant, stored as linked, within the statement timeout
    assert response.status_code == 200, response.text
    assert response.json() == {"assignments": dict.fromkeys(batch, "green")}
    assert Assignment.objects.filter(subject_id__in=batch, source="linked").count() == len(batch)
    assert seconds < settings.DATABASE_STATEMENT_TIMEOUT_MS / 1000
