"""scripts/run-demo, the README's first command: a token ready to export, and a clear way out when the demo
configuration no longer applies. Run on a SQLite file of its own, never the checkout's var/db.sqlite3."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest

from devtools.ports import free_port
from tests.helpers import PROJECT_DIR
from tests.helpers.resources import experiment, variant, yaml_documents
from tests.helpers.server import demo_env, demo_server

pytestmark = [pytest.mark.e2e]

ENDED = experiment(
    "banner-copy",
    subject_type="cookie",
    status="ended",
    lab="growth",
    variants=[variant("control", 0.5, control=True), variant("short", 0.5)],
)


def test_run_demo__prints_an_export_line__the_readme_example_answers_with_it(tmp_path):
    # Given the demo serving, and the token of the `export TOKEN=` line it printed
    with demo_server(tmp_path / "demo.sqlite3") as (address, token, _):
        # When the README's example is sent with that token
        response = httpx.post(
            f"http://{address}/experiment-assignments",
            headers={"Authorization": f"Bearer {token}"},
            json={"experiment_id": "checkout-button", "subject_ids": ["u1", "u2"]},
        )

    # Then it answers as the README says
    assert response.json() == {"assignments": {"u1": "control", "u2": "green"}}


def test_run_demo__demo_experiment_moved_on__refuses_and_says_how_to_start_over(tmp_path):
    # Given a demo database whose banner-copy experiment has ended since
    env = demo_env(tmp_path / "demo.sqlite3", free_port())
    manage = [str(PROJECT_DIR / ".venv" / "bin" / "python"), "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=PROJECT_DIR, env=env, check=True, timeout=120)
    subprocess.run([*manage, "apply_resources", "examples/demo.yaml"], cwd=PROJECT_DIR, env=env, check=True)
    (tmp_path / "ended.yaml").write_text(yaml_documents(ENDED))
    subprocess.run([*manage, "apply_resources", str(tmp_path / "ended.yaml")], cwd=PROJECT_DIR, env=env, check=True)

    # When the demo is started again
    done = subprocess.run(["scripts/run-demo"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=120)

    # Then it stops, says why and how to reset; and --reset refuses to touch a database named by DATABASE_URL
    assert done.returncode == 1
    assert "cannot go back from ended to active" in done.stderr
    assert "scripts/run-demo --reset" in done.stderr
    reset = subprocess.run(
        ["scripts/run-demo", "--reset"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert reset.returncode == 2
    assert re.search(r"only the embedded SQLite database", reset.stderr)
    assert (tmp_path / "demo.sqlite3").exists()


def test_run_demo__restarted__the_exported_token_keeps_working_and_stays_its_owners(tmp_path):
    # Given the demo served once, and its token exported in another shell
    with demo_server(tmp_path / "demo.sqlite3") as (address, first, _):
        pass

    # When the demo is restarted
    with demo_server(tmp_path / "demo.sqlite3") as (address, token, lines):
        response = httpx.post(
            f"http://{address}/experiment-assignments",
            headers={"Authorization": f"Bearer {first}"},
            json={"experiment_id": "checkout-button", "subject_ids": ["u1"]},
        )

    # Then it prints the same token, which still answers, and says why; the token is printed only on its
    # export line, and kept for its owner alone
    assert token == first
    assert response.status_code == 200
    assert any(line.startswith("kept token 'demo' (role proxy") for line in lines), lines
    assert [line for line in lines if first in line] == [f"export TOKEN={first}"]
    kept = tmp_path / "demo.sqlite3.demo-token"
    assert kept.read_text() == first + "\n"
    assert kept.stat().st_mode & 0o777 == 0o600


def test_run_demo__token_revoked_since__a_new_one_said_so(tmp_path):
    # Given the demo's token revoked since it was printed
    with demo_server(tmp_path / "demo.sqlite3") as (_, first, _):
        pass
    env = demo_env(tmp_path / "demo.sqlite3", free_port())
    manage = [str(PROJECT_DIR / ".venv" / "bin" / "python"), "manage.py"]
    subprocess.run(
        [*manage, "revoke_api_token", "--name", "demo"], cwd=PROJECT_DIR, env=env, check=True, capture_output=True
    )

    # When the demo is restarted
    with demo_server(tmp_path / "demo.sqlite3") as (address, token, lines):
        response = httpx.get(f"http://{address}/api/schema", headers={"Authorization": f"Bearer {token}"})

    # Then it creates a new one and keeps that
    assert token != first
    assert response.status_code == 200
    assert any(line.startswith("created token 'demo' (role proxy") for line in lines), lines
    assert (tmp_path / "demo.sqlite3.demo-token").read_text() == token + "\n"


def test_run_demo__script_signs_in_to_the_staff_console_over_plain_http(tmp_path):
    # Given a staff account on the demo's database
    env = demo_env(tmp_path / "demo.sqlite3", free_port())
    manage = [str(PROJECT_DIR / ".venv" / "bin" / "python"), "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=PROJECT_DIR, env=env, check=True, timeout=120)
    password = "a-long-demo-password-42"
    subprocess.run(
        [*manage, "createsuperuser", "--noinput", "--username", "alice", "--email", "alice@example.com"],
        cwd=PROJECT_DIR,
        env={**env, "DJANGO_SUPERUSER_PASSWORD": password},
        check=True,
        capture_output=True,
    )

    with (
        demo_server(tmp_path / "demo.sqlite3") as (address, _, _),
        httpx.Client(base_url=f"http://{address}") as web,
    ):
        # When a script signs in over plain HTTP, as curl or python-requests would: it sends back only the
        # cookies it may send over http://
        form = web.get("/admin/login/")
        signed_in = web.post(
            "/admin/login/?next=/admin/",
            data={
                "username": "alice",
                "password": password,
                "next": "/admin/",
                "csrfmiddlewaretoken": web.cookies["csrftoken"],
            },
        )
        console = web.get("/admin/")

    # Then it is signed in: the form accepted, and the console served to its session
    assert form.status_code == 200
    assert (signed_in.status_code, signed_in.headers.get("location")) == (302, "/admin/"), signed_in.text[:2000]
    assert console.status_code == 200
    assert "Site administration" in console.text
