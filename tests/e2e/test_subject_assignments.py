"""POST /assignments and following links on a running server, as a product backend and an operator use them."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from assignments.models import Assignment
from tests.helpers import PROJECT_DIR
from tests.helpers.resources import experiment, variant, yaml_documents
from tests.helpers.server import database_url_for_tests, gunicorn, wait_until
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-subject-assignments-not-secret"
NEW_EXPERIMENT = experiment(
    "onboarding", lab="growth", variants=[variant("control", 0.5, control=True), variant("tour", 0.5)]
)


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def link(http: httpx.Client, cookie: str, user: str) -> None:
    identifiers = [{"subject_type": "cookie", "subject_id": cookie}, {"subject_type": "user", "subject_id": user}]
    assert http.post("/id-link", json={"identifiers": identifiers}).json() == {"success": True}


def test_subject_assignments__demo_configuration_on_a_running_server__links_followed_and_new_experiments_seen(
    tmp_path,
):
    # Given the demo configuration applied by the command, and a server with two workers
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": SECRET_KEY}
    manage(env, "apply_resources", "examples/demo.yaml")
    _, token = api_token_create(name="backend")
    with (
        gunicorn(env=env, workers=2) as (base_url, _),
        httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as http,
    ):
        wait_until(lambda: http.get("/healthz").status_code == 200, timeout=15)

        # When a visitor known by a user ID and a cookie asks for every running experiment
        first = http.post("/assignments", json={"subject": {"user": "u1", "cookie": "c-81"}})

        # Then both demo experiments answer, each for the identifier of its subject type
        assert first.json() == {
            "assignments": {"banner-copy": "control", "checkout-button": "control"},
            "new_assignments": ["banner-copy", "checkout-button"],
            "unassigned": {},
        }

        # And a second cookie of the same person, linked through the user, keeps the banner the first one saw,
        # although the formula alone would give it `short`
        link(http, "c-81", "u1")
        link(http, "c-82", "u1")
        carried = http.post("/experiment-assignments", json={"experiment_id": "banner-copy", "subject_ids": ["c-82"]})
        assert carried.json() == {"assignments": {"c-82": "control"}}
        assert Assignment.objects.get(subject_id="c-82").source == "linked"

        # And a read without enrolling stores nothing
        read = http.post("/assignments", json={"subject": {"cookie": "c-99"}, "assign": False})
        assert read.json() == {"assignments": {}, "new_assignments": [], "unassigned": {"banner-copy": "not_assigned"}}

        # When an operator starts a new experiment from another process
        config = tmp_path / "onboarding.yaml"
        config.write_text(yaml_documents(NEW_EXPERIMENT))
        manage(env, "apply_resources", str(config))

        # Then every worker answers it on its next request for the subject's running experiments
        for _ in range(6):
            body = http.post("/assignments", json={"subject": {"user": "u1"}}).json()
            assert list(body["assignments"]) == ["checkout-button", "onboarding"]
        assert not Assignment.objects.filter(subject_id="c-99").exists()
