"""scripts/run-demo, the README's first command: a token ready to export, and a clear way out when the demo
configuration no longer applies. Run on a SQLite file of its own, never the checkout's var/db.sqlite3."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest

from devtools.ports import free_port
from tests.server import PROJECT_DIR, demo_env, demo_server

pytestmark = [pytest.mark.e2e]

ENDED = """
schemaVersion: 1
kind: experiment
metadata: {id: banner-copy, status: ended, parentId: growth}
spec:
  subjectType: cookie
  variants:
    - {id: control, control: true, split: 0.5}
    - {id: short, split: 0.5}
"""


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
    (tmp_path / "ended.yaml").write_text(ENDED)
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
