"""assignments/configuration/history.py: every real change of a resource is recorded; `manage.py resource_history KIND
ID` prints it, newest first."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys

import pytest
from django.core.management import CommandError

from assignments.configuration.resources import ResourceInvalid
from assignments.models import ResourceChange
from tests.helpers import PROJECT_DIR
from tests.helpers.commands import command_output
from tests.helpers.resources import apply_resources, experiment, subject_type, variant
from tests.helpers.server import database_url_for_tests


def checkout(status: str = "active", split: float = 0.5) -> tuple[dict, ...]:
    """The subject type `user` and the experiment `checkout`, control at `split` and green at the rest."""
    variants = [variant("control", split, control=True), variant("green", round(1 - split, 6))]
    return subject_type("user"), experiment("checkout", status=status, variants=variants)


def history(resource_id: str = "checkout") -> list[ResourceChange]:
    return list(ResourceChange.objects.filter(resource_id=resource_id).order_by("resource_version"))


def run(*args: str) -> list[str]:
    return command_output("resource_history", *args).splitlines()


def test_apply__creation_and_change__one_entry_each_with_documents_and_os_user(db):
    apply_resources(*checkout())
    apply_resources(*checkout(split=0.2))

    first, second = history()
    assert (first.resource_version, first.before, first.channel) == (1, None, "command")
    assert first.actor == getpass.getuser()
    assert second.resource_version == 2
    assert second.before == first.after
    assert [v["split"] for v in second.after["spec"]["variants"]] == [0.2, 0.8]
    assert "resourceVersion" not in second.after["metadata"]


def test_apply__unchanged_dry_run_or_refused__no_entry(db):
    apply_resources(*checkout())

    apply_resources(*checkout())
    apply_resources(*checkout(split=0.3), dry_run=True)
    with pytest.raises(ResourceInvalid):
        apply_resources(*checkout(status="draft", split=0.3))

    assert [change.resource_version for change in history()] == [1]


def test_resource_history__newest_first_with_who_and_a_diff(db):
    apply_resources(*checkout())
    apply_resources(*checkout(status="ended"))

    lines = run("experiment", "CHECKOUT")

    versions = [line for line in lines if line.startswith("version ")]
    assert versions[0].startswith("version 2  ") and versions[1].startswith("version 1  ")
    assert versions[0].endswith(f"  {getpass.getuser()} (command)")
    assert "-  status: active" in lines and "+  status: ended" in lines
    assert "--- (none)" in lines and "+++ experiment checkout v1" in lines


def test_resource_history__unknown_resource__fails(db):
    with pytest.raises(CommandError, match="no recorded changes of lab 'nope'"):
        run("lab", "nope")


def test_resource_history__unknown_kind__fails(db):
    with pytest.raises(CommandError):
        run("variant", "x")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_resource_history_process__output_on_stdout_and_exit_codes():
    apply_resources(subject_type("user"))
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), "SECRET_KEY": "history-tests"}

    def history_of(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "manage.py", "resource_history", *args]
        return subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, timeout=60, text=True)

    found, missing = history_of("subjecttype", "user"), history_of("subjecttype", "device")

    assert found.returncode == 0 and found.stderr == ""
    assert found.stdout.startswith("version 1  ")
    assert missing.returncode == 1 and missing.stdout == ""
    assert "no recorded changes" in missing.stderr


def gated(**gates) -> tuple[dict, ...]:
    """`checkout`, active, on `user` declaring `country`, with the given gates."""
    return subject_type("user", attributes={"country": "string"}), experiment("checkout", **gates)


BASE_GATES = {
    "enrollment": {"startAt": "2026-12-01T09:00:00+01:00"},
    "targeting": [{"attribute": "country", "in": ["DE"]}],
    "coverage": 0.5,
}


@pytest.mark.parametrize(
    ("change", "removed", "added"),
    [
        ({"coverage": 0.8}, ["-  coverage: 0.5"], ["+  coverage: 0.8"]),
        ({"targeting": [{"attribute": "country", "in": ["DE", "AT"]}]}, [], ["+    - AT"]),
        (
            {"enrollment": {"startAt": "2026-12-01T09:00:00+01:00", "stopAt": "2027-01-15T00:00:00+01:00"}},
            [],
            ["+    stopAt: '2027-01-14T23:00:00Z'"],
        ),
    ],
    ids=["coverage", "targeting", "enrollment"],
)
def test_resource_history__gate_changed__entry_whose_diff_shows_the_rule_before_and_after(db, change, removed, added):
    apply_resources(*gated(**BASE_GATES))
    apply_resources(*gated(**{**BASE_GATES, **change}))

    lines = run("experiment", "checkout")

    assert lines[0].startswith("version 2  ")
    newest = lines[: lines.index("")]
    changed = [line for line in newest[3:] if line[:1] in "+-" and not line.startswith("@@")]
    assert changed == removed + added


def test_resource_history__subject_type_attributes__recorded_as_written(db):
    apply_resources(subject_type("user"))
    apply_resources(subject_type("user", attributes={"country": "string", "seats": "number"}))

    lines = run("subjecttype", "user")

    assert [line for line in lines[: lines.index("")] if line.startswith("+") and not line.startswith("+++")] == [
        "+spec:",
        "+  attributes:",
        "+  - name: country",
        "+    type: string",
        "+  - name: seats",
        "+    type: number",
    ]


def test_apply__experiment_without_gates__history_documents_as_before_gates_existed(db):
    apply_resources(*checkout())
    apply_resources(*checkout(split=0.4))

    first, second = history()

    # Exactly the keys the builds before the gates recorded: no empty enrollment, targeting or coverage
    assert first.after == {
        "schemaVersion": 1,
        "kind": "experiment",
        "metadata": {
            "id": "checkout",
            "name": "checkout",
            "description": "",
            "status": "active",
            "parentId": "default",
        },
        "spec": {
            "subjectType": "user",
            "hypothesis": "",
            "salt": "checkout",
            "followLinks": False,
            "variants": [
                {"id": "control", "control": True, "split": 0.5},
                {"id": "green", "control": False, "split": 0.5},
            ],
        },
    }
    assert second.before == first.after
    assert second.after["spec"].keys() == first.after["spec"].keys()
    (user,) = ResourceChange.objects.filter(kind="subjecttype")
    assert user.after == {
        "schemaVersion": 1,
        "kind": "subjecttype",
        "metadata": {"id": "user", "name": "user", "description": "", "status": "active"},
    }
