"""docs/how-to/deploy.md and docs/how-to/proxy.md against the machine: their set-up steps, run as written
(names and paths made unique), do what the pages say."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.helpers import PROJECT_DIR
from tests.helpers.processes import PRODUCTION_ENV, check_deploy, manage_env, manage_run

DEPLOY = PROJECT_DIR / "docs" / "how-to" / "deploy.md"
PROXY = PROJECT_DIR / "docs" / "how-to" / "proxy.md"


def _fenced_shell_blocks(page: Path) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", page.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def deploy_sql() -> str:
    """The SQL of deploy.md's first step, the heredoc that `psql` is given."""
    for block in _fenced_shell_blocks(DEPLOY):
        found = re.search(r"psql <<'EOF'\n(.*?)^EOF$", block, re.MULTILINE | re.DOTALL)
        if found:
            return found.group(1)
    raise AssertionError(f"{DEPLOY.name}: no psql heredoc creating the role and the database")


def proxy_token_step() -> list[str]:
    """The commands of proxy.md's step 2, which keeps the proxy's token."""
    for block in _fenced_shell_blocks(PROXY):
        step = re.search(r"^# 2\. .*?\n(.*?)(?:^# 3\.|\Z)", block, re.MULTILINE | re.DOTALL)
        if step:
            return [line for line in step.group(1).splitlines() if line.strip()]
    raise AssertionError(f"{PROXY.name}: no step 2 keeping the proxy's token")


def superuser() -> psycopg.Connection:
    params = connection.get_connection_params()
    return psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True)


@pytest.fixture
def deployment_names():
    """A role and a database name of this test's own, dropped afterwards."""
    name = f"deploy_{uuid.uuid4().hex[:8]}"
    yield name
    with superuser() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.mark.postgres
@pytest.mark.single_node("creates a database and a role on the one server the tests use")
def test_deploy_doc__role_and_database_as_written__migrate_as_that_role_succeeds(db, deployment_names):
    # Given the page's SQL, with its names made this test's own
    sql = deploy_sql().replace("assignments", deployment_names)
    with superuser() as admin:
        for statement in filter(None, (part.strip() for part in sql.split(";"))):
            admin.execute(statement)
    settings_dict = connection.settings_dict
    url = (
        f"postgres://{deployment_names}:choose-a-password@{settings_dict['HOST'] or '127.0.0.1'}:"
        f"{settings_dict['PORT'] or 5432}/{deployment_names}"
    )

    # When the first migrate runs as that role, then every migration applies (functions and triggers included)
    result = manage_run("migrate", env={"DATABASE_URL": url, "SECRET_KEY": "docs-tests"}, timeout=300)

    assert result.returncode == 0, result.stderr
    with superuser() as admin:
        (owner,) = admin.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", [deployment_names]
        ).fetchone()
    assert owner == deployment_names


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_proxy_doc__token_step_run_twice__token_kept_once_and_the_rerun_changes_nothing(tmp_path):
    # Given the page's step 2, its folder under tmp_path and its token of this test's own
    folder = tmp_path / "api-proxy"
    name = f"proxy-{uuid.uuid4().hex[:8]}"
    script = "\n".join(
        line.replace("/etc/api-proxy", str(folder)).replace("--name proxy", f"--name {name}")
        for line in proxy_token_step()
    )

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=PROJECT_DIR,
            env={**manage_env(), "PATH": f"{PROJECT_DIR / '.venv' / 'bin'}:/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )

    # When it runs, then the folder and the token file are made, readable by their owner only
    first = run()
    assert first.returncode == 0, first.stderr
    token = folder / "token"
    assert folder.stat().st_mode & 0o777 == 0o750
    assert token.stat().st_mode & 0o777 == 0o600
    kept = token.read_text()

    # When it runs again, then it succeeds and keeps the same token
    second = run()
    assert second.returncode == 0, second.stderr
    assert token.read_text() == kept


def deploy_check_warnings() -> set[str]:
    """The warnings deploy.md's step 3 says `check --deploy` lists."""
    text = DEPLOY.read_text(encoding="utf-8")
    step = text[text.index("**3. Check the settings**") : text.index("\n## ", text.index("**3. Check the settings**"))]
    return set(re.findall(r"`(security\.W\d+)`", step))


def test_deploy_doc__check_deploy_warnings__those_it_prints_with_a_weak_key_and_without_tls():
    # Given production's settings with a weak secret key, as a first deployment may have
    printed = check_deploy({**PRODUCTION_ENV, "SECRET_KEY": "change-me"})

    # Then the page names every warning `check --deploy` prints, and no other
    assert printed.returncode == 0, printed.stderr
    assert set(re.findall(r"\((security\.W\d+)\)", printed.stderr)) == deploy_check_warnings()
