"""create_api_token, revoke_api_token, list_api_tokens: output, errors and exit codes (docs/how-to/tokens.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.helpers import PROJECT_DIR
from tests.helpers.server import database_url_for_tests
from tokens.models import ApiToken, Role
from tokens.selectors import api_token_find
from tokens.services import api_token_create, api_token_revoke


def run(*argv: str) -> tuple[int, str, str]:
    """Run a command in this process: (the exit code manage.py would give, stdout, stderr).

    manage.py prints a CommandError on stderr and exits with its returncode; the
    subprocess test at the end shows that path for real.
    """
    out, err = StringIO(), StringIO()
    try:
        call_command(*argv, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


def test_create_api_token__defaults__proxy_token_alone_on_the_last_line(db):
    code, out, err = run("create_api_token", "--name", "backend")

    lines = out.splitlines()
    assert code == 0
    assert err == ""
    assert lines[0] == "created token 'backend' (role proxy, expires never); it is shown only now:"
    api_token = api_token_find(token=lines[-1])
    assert api_token is not None
    assert (api_token.name, api_token.role, api_token.expires_at) == ("backend", Role.PROXY, None)


def test_create_api_token__admin_role_and_expiry__stored(db):
    before = timezone.now()

    code, out, _ = run("create_api_token", "--name", "ops", "--role", "admin", "--expires-in-days", "7")

    api_token = api_token_find(token=out.splitlines()[-1])
    assert code == 0
    assert api_token.role == Role.ADMIN
    assert before + timedelta(days=7) <= api_token.expires_at <= timezone.now() + timedelta(days=7)
    assert "role admin, expires 20" in out


def test_create_api_token__client_role__a_token_that_may_only_evaluate_flags(db):
    code, out, _ = run("create_api_token", "--name", "web-app", "--role", "client")

    assert code == 0
    assert "role client" in out.splitlines()[0]
    assert api_token_find(token=out.splitlines()[-1]).role == Role.CLIENT


def test_create_api_token__duplicate_name__error_on_stderr_exit_1(db):
    api_token_create(name="backend")

    code, out, err = run("create_api_token", "--name", "backend")

    assert code == 1
    assert out == ""
    assert "a token named 'backend' exists already" in err
    assert ApiToken.objects.count() == 1


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--name", "bad name"], 1, "invalid token name"),
        (["--name", "x", "--expires-in-days", "0"], 1, "between 1 and 36500 days"),
        (["--name", "x", "--expires-in-days", "soon"], 1, "invalid int value"),
        (["--name", "x", "--role", "root"], 1, "invalid choice"),
        ([], 1, "--name"),
    ],
    ids=["bad-name", "zero-days", "days-not-a-number", "unknown-role", "no-name"],
)
def test_create_api_token__bad_arguments__error_and_nothing_stored(db, argv, code, message):
    exit_code, out, err = run("create_api_token", *argv)

    assert exit_code == code
    assert out == ""
    assert message in err
    assert not ApiToken.objects.exists()


def test_create_api_token__replace__old_token_revoked_new_one_printed(db):
    _, old = api_token_create(name="demo")

    code, out, _ = run("create_api_token", "--name", "demo", "--role", "admin", "--replace")

    assert code == 0
    assert "replacing the one created" in out.splitlines()[0]
    assert api_token_find(token=old).revoked_at is not None
    new = api_token_find(token=out.splitlines()[-1])
    assert new.revoked_at is None and new.role == Role.ADMIN


def keep_demo(path) -> tuple[int, str, str]:
    return run("create_api_token", "--name", "demo", "--replace", "--keep-in", str(path))


def test_create_api_token__keep_in_no_file__created_and_kept_for_its_owner_only(db, tmp_path):
    code, out, _ = keep_demo(tmp_path / "demo-token")

    token = out.splitlines()[-1]
    assert code == 0 and out.startswith("created token 'demo'")
    assert (tmp_path / "demo-token").read_text() == token + "\n"
    assert (tmp_path / "demo-token").stat().st_mode & 0o777 == 0o600


def test_create_api_token__keep_in_live_token__the_same_token_again_still_active(db, tmp_path):
    # Given the demo token kept from an earlier run, in a file someone made readable to others
    _, first, _ = keep_demo(tmp_path / "demo-token")
    (tmp_path / "demo-token").chmod(0o644)

    # When the demo starts again
    code, out, _ = keep_demo(tmp_path / "demo-token")

    # Then the same token is printed, still active, and the file is its owner's alone
    assert code == 0
    assert out.startswith("kept token 'demo' (role proxy, expires never), created ") and "from " in out
    assert out.splitlines()[-1] == first.splitlines()[-1]
    assert api_token_find(token=first.splitlines()[-1]).revoked_at is None
    assert ApiToken.objects.count() == 1


@pytest.mark.parametrize(
    "lapse",
    [
        pytest.param(lambda: api_token_revoke(name="demo"), id="revoked"),
        pytest.param(lambda: ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1)), id="expired"),
        pytest.param(lambda: ApiToken.objects.update(role=Role.ADMIN), id="another-role"),
        pytest.param(lambda: ApiToken.objects.all().delete(), id="another-database"),
    ],
)
def test_create_api_token__keep_in_token_no_longer_live__a_new_one_kept(db, tmp_path, lapse):
    _, first, _ = keep_demo(tmp_path / "demo-token")
    lapse()

    code, out, _ = keep_demo(tmp_path / "demo-token")

    token = out.splitlines()[-1]
    assert code == 0 and out.startswith("created token 'demo'")
    assert token != first.splitlines()[-1]
    assert (tmp_path / "demo-token").read_text() == token + "\n"
    assert api_token_find(token=token).state(now=timezone.now()) == "active"


def test_revoke_api_token__live_token__revoked_summary(db):
    _, token = api_token_create(name="backend")

    code, out, err = run("revoke_api_token", "--name", "backend")

    assert (code, out, err) == (0, "revoked token 'backend'\n", "")
    assert api_token_find(token=token).revoked_at is not None


def test_revoke_api_token__already_revoked__says_so_exit_0(db):
    api_token_create(name="backend")
    api_token_revoke(name="backend")

    code, out, _ = run("revoke_api_token", "--name", "backend")

    assert code == 0
    assert out.startswith("token 'backend' was already revoked at 20")


def test_revoke_api_token__unknown_name__error_exit_1(db):
    code, out, err = run("revoke_api_token", "--name", "ghost")

    assert code == 1
    assert out == ""
    assert "no token is named 'ghost'" in err


def test_list_api_tokens__no_tokens__says_so(db):
    assert run("list_api_tokens") == (0, "no API tokens\n", "")


def test_list_api_tokens__tokens__columns_and_never_the_secret(db):
    # Given an active admin token that has been used, an expired one and a revoked one
    used, used_token = api_token_create(name="ops", role=Role.ADMIN, expires_at=timezone.now() + timedelta(days=3))
    ApiToken.objects.filter(pk=used.pk).update(last_used_at=timezone.now())
    expired, expired_token = api_token_create(name="old", expires_at=timezone.now() + timedelta(days=1))
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(days=1))
    _, revoked_token = api_token_create(name="gone")
    api_token_revoke(name="gone")

    code, out, _ = run("list_api_tokens")

    # Then one row per token under a header, and no secret, digest or prefix anywhere
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["name", "role", "state", "created", "expires", "last", "used", "revoked"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["ops"][1:3] == ["admin", "active"] and rows["ops"][6] == "-"
    assert rows["ops"][4] != "never" and rows["ops"][5] != "-"
    assert rows["old"][1:3] == ["proxy", "expired"]
    assert rows["gone"][2] == "revoked" and rows["gone"][6].startswith("20")
    for api_token in ApiToken.objects.all():
        assert api_token.secret_hash not in out and api_token.prefix not in out
    for token in (used_token, expired_token, revoked_token):
        assert token.partition(".")[2] not in out


def manage(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url_for_tests()}
    return subprocess.run(
        [sys.executable, "manage.py", *argv], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_commands__as_processes__stdout_stderr_and_exit_codes():
    # When the commands run as the shell runs them
    created = manage("create_api_token", "--name", "backend", "--role", "admin")
    duplicate = manage("create_api_token", "--name", "backend")
    bad_role = manage("create_api_token", "--name", "other", "--role", "root")
    listed = manage("list_api_tokens")
    revoked = manage("revoke_api_token", "--name", "backend")
    unknown = manage("revoke_api_token", "--name", "ghost")

    # Then successes print on stdout and exit 0; failures print on stderr only and exit non-zero
    token = created.stdout.splitlines()[-1]
    assert (created.returncode, created.stderr) == (0, "")
    assert api_token_find(token=token).revoked_at is not None
    assert (duplicate.returncode, duplicate.stdout) == (1, "")
    assert "exists already" in duplicate.stderr
    assert (bad_role.returncode, bad_role.stdout) == (2, "")
    assert "invalid choice: 'root'" in bad_role.stderr
    assert listed.returncode == 0 and "backend  admin  active" in listed.stdout
    assert token.partition(".")[2] not in listed.stdout
    assert (revoked.returncode, revoked.stdout) == (0, "revoked token 'backend'\n")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert "no token is named 'ghost'" in unknown.stderr
