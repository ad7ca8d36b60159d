"""scripts/run-demo, the README's first command: a token ready to export, and a clear way out when the demo
configuration no longer applies. Run on a SQLite file of its own, never the checkout's var/db.sqlite3."""

from __future__ import annotations

import os
import re
import subprocess

import httpx
import pytest

from tests.server import PROJECT_DIR, free_port, process_stop, wait_for_port

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


def demo_env(tmp_path, port: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DATABASE_", "GUNICORN_"))}
    return {**env, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}", "GUNICORN_BIND": f"127.0.0.1:{port}"}


def test_run_demo__prints_an_export_line__the_readme_example_answers_with_it(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        ["scripts/run-demo"], cwd=PROJECT_DIR, env=demo_env(tmp_path, port), stdout=subprocess.PIPE, text=True
    )
    try:
        # Given the banner the demo prints before it serves
        lines = []
        while not any(line.startswith("API description:") for line in lines):
            line = process.stdout.readline()
            assert line, "run-demo ended before serving:\n" + "".join(lines)
            lines.append(line.strip())
        exports = [line for line in lines if line.startswith("export TOKEN=")]
        assert len(exports) == 1
        token = exports[0].removeprefix("export TOKEN=")
        wait_for_port(port)

        # When the README's example is sent with $TOKEN set from that line
        response = httpx.post(
            f"http://127.0.0.1:{port}/experiment-assignments",
            headers={"Authorization": f"Bearer {token}"},
            json={"experiment_id": "checkout-button", "subject_ids": ["u1", "u2"]},
        )

        # Then it answers as the README says
        assert response.json() == {"assignments": {"u1": "control", "u2": "green"}}
    finally:
        process_stop(process)


def test_run_demo__demo_experiment_moved_on__refuses_and_says_how_to_start_over(tmp_path):
    # Given a demo database whose banner-copy experiment has ended since
    env = demo_env(tmp_path, free_port())
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
