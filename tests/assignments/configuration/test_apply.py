"""assignments/configuration/apply.py: `manage.py apply_resources` (docs/reference/resources.md): files in, one
transaction, a line per resource."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError

from assignments.models import Cohort, Experiment, Lab, SubjectType
from tests.helpers import PROJECT_DIR
from tests.helpers.commands import command_output

# The files the command reads, written out: its output names files and documents, so their text is what
# is tested, not set-up.
SUBJECT_TYPES = """
schemaVersion: 1
kind: subjecttype
metadata: {id: user, name: Logged-in user}
---
schemaVersion: 1
kind: subjecttype
metadata: {id: device}
"""

LAB_AND_EXPERIMENT = """
schemaVersion: 1
kind: experiment
metadata: {id: checkout-button, status: active, parentId: growth}
spec:
  subjectType: user
  variants:
    - {id: control, control: true, split: 0.5}
    - {id: green, split: 0.5}
---
schemaVersion: 1
kind: lab
metadata: {id: growth, name: Growth team}
"""

BAD_SPLIT = """
schemaVersion: 1
kind: lab
metadata: {id: other}
---
schemaVersion: 1
kind: experiment
metadata: {id: broken}
spec:
  subjectType: user
  variants:
    - {id: control, control: true, split: high}
    - {id: green, split: 0.5}
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(*args: str) -> list[str]:
    return command_output("apply_resources", *args).splitlines()


def refused(*args: str) -> str:
    """The error `manage.py apply_resources *args` stops with."""
    with pytest.raises(CommandError) as caught:
        run(*args)
    return str(caught.value)


def nothing_configured() -> bool:
    return (
        not SubjectType.objects.exists() and not Experiment.objects.exists() and not Lab.objects.exclude(key="default")
    )


def test_apply_resources__several_files__one_line_per_resource_in_order(db, tmp_path):
    # Given the experiment in the second file, before the lab it lives in
    first = write(tmp_path, "subject-types.yaml", SUBJECT_TYPES)
    second = write(tmp_path, "growth.yaml", LAB_AND_EXPERIMENT)

    lines = run(first, second)

    assert lines == [
        "subjecttype user: created",
        "subjecttype device: created",
        "experiment checkout-button: created",
        "lab growth: created",
    ]
    experiment = Experiment.objects.get()
    assert (experiment.lab.key, experiment.subject_type.key, experiment.status) == ("growth", "user", "active")
    assert Cohort.objects.get(experiment=experiment).number == 1


def test_apply_resources__applied_twice__second_run_only_unchanged(db, tmp_path):
    files = [write(tmp_path, "a.yaml", SUBJECT_TYPES), write(tmp_path, "b.yaml", LAB_AND_EXPERIMENT)]
    run(*files)

    lines = run(*files)

    assert lines == [
        "subjecttype user: unchanged",
        "subjecttype device: unchanged",
        "experiment checkout-button: unchanged",
        "lab growth: unchanged",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BAD_SPLIT, "document 2: spec.variants.0.split: must be a number from 0 to 1, not the string 'high'"),
        (
            LAB_AND_EXPERIMENT.replace("subjectType: user", "subjectType: cookie"),
            "document 1: experiment 'checkout-button': spec.subjectType: no subject type 'cookie'",
        ),
    ],
    ids=["invalid-field", "reference-to-a-subject-type-nobody-defines"],
)
def test_apply_resources__error_in_the_second_file__error_names_file_document_and_field_and_no_file_applied(
    db, tmp_path, text, message
):
    # Given a valid file, and a second one with an invalid field or naming a subject type nobody defines
    good = write(tmp_path, "good.yaml", SUBJECT_TYPES)
    bad = write(tmp_path, "bad.yaml", text)

    error = refused(good, bad)

    assert f"{bad}: {message}" in error
    assert nothing_configured()


def test_apply_resources__nul_in_a_string__field_error_not_a_database_error_and_nothing_applied(db, tmp_path):
    # Given a valid file, and one whose experiment's hypothesis holds a NUL (PostgreSQL refuses NUL in text)
    good = write(tmp_path, "good.yaml", SUBJECT_TYPES)
    bad = write(
        tmp_path, "bad.yaml", LAB_AND_EXPERIMENT.replace("subjectType: user", 'subjectType: user\n  hypothesis: "a\\0"')
    )

    error = refused(good, bad)

    assert error == (
        f"resources not applied:\n{bad}: document 1: spec.hypothesis: must not contain control characters other "
        "than tab and line breaks: U+0000 at character 2 (the database cannot store NUL)"
    )
    assert nothing_configured()


@pytest.mark.parametrize(
    ("first_text", "second_text", "messages"),
    [
        (
            "schemaVersion: 1\nkind: lab\nmetadata: {id: a, colour: red}\n",
            "schemaVersion: 1\nkind: wizard\nmetadata: {id: b}\n",
            [
                "{first}: document 1: metadata.colour: unknown field",
                "{second}: document 1: kind: must be one of subjecttype, lab, layer, holdout, experiment",
            ],
        ),
        (
            "schemaVersion: 1\nkind: lab\nmetadata: {id: growth}\n",
            "schemaVersion: 1\nkind: lab\nmetadata: {id: Growth}\n",
            ["{second}: document 1: metadata.id: lab 'Growth' is already defined in {first}: document 1"],
        ),
    ],
    ids=["an-error-in-each-file", "ids-differing-only-in-case-across-files"],
)
def test_apply_resources__two_files_refused__every_error_reported_and_nothing_applied(
    db, tmp_path, first_text, second_text, messages
):
    first = write(tmp_path, "one.yaml", first_text)
    second = write(tmp_path, "two.yaml", second_text)

    error = refused(first, second)

    for message in messages:
        assert message.format(first=first, second=second) in error
    # Neither file applied: no lab `growth` either, in any case
    assert nothing_configured()


@pytest.mark.parametrize(
    "text",
    [
        "schemaVersion: 1\nkind: lab\nmetadata: {id: a}\nowner: me\n",
        "schemaVersion: 1\nkind: lab\nmetadata: {id: a, owner: me}\n",
        SUBJECT_TYPES + "---" + LAB_AND_EXPERIMENT.replace("subjectType: user", "subjectType: user\n  owner: me"),
        SUBJECT_TYPES + "---" + LAB_AND_EXPERIMENT.replace("split: 0.5}\n---", "split: 0.5, owner: me}\n---"),
    ],
    ids=["top-level", "metadata", "spec", "variant"],
)
def test_apply_resources__unknown_field__rejected(db, tmp_path, text):
    error = refused(write(tmp_path, "r.yaml", text))
    assert "owner: unknown field" in error
    assert nothing_configured()


def test_apply_resources__missing_file__error_names_it_and_nothing_applied(db, tmp_path):
    good = write(tmp_path, "good.yaml", SUBJECT_TYPES)
    missing = str(tmp_path / "missing.yaml")

    error = refused(good, missing)

    assert f"{missing}: cannot read" in error
    assert nothing_configured()


def test_apply_resources__dry_run__prints_what_would_happen_and_changes_nothing(db, tmp_path):
    files = [write(tmp_path, "a.yaml", SUBJECT_TYPES), write(tmp_path, "b.yaml", LAB_AND_EXPERIMENT)]

    lines = run(*files, "--dry-run")

    assert lines == [
        "subjecttype user: created",
        "subjecttype device: created",
        "experiment checkout-button: created",
        "lab growth: created",
        "dry run: nothing was changed",
    ]
    assert nothing_configured()


def test_apply_resources__dry_run_of_an_update__version_and_cohorts_untouched(db, tmp_path):
    files = [write(tmp_path, "a.yaml", SUBJECT_TYPES), write(tmp_path, "b.yaml", LAB_AND_EXPERIMENT)]
    run(*files)
    changed = write(
        tmp_path,
        "c.yaml",
        LAB_AND_EXPERIMENT.replace(
            "split: 0.5}\n    - {id: green, split: 0.5}", "split: 0.1}\n    - {id: green, split: 0.9}"
        ),
    )

    lines = run(files[0], changed, "--dry-run")

    assert "experiment checkout-button: updated" in lines
    experiment = Experiment.objects.get()
    assert experiment.resource_version == 1
    assert list(experiment.variants.values_list("split", flat=True)) == [0.5, 0.5]
    assert Cohort.objects.filter(experiment=experiment).count() == 1


def test_apply_resources__dash__reads_standard_input(db, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(SUBJECT_TYPES))
    assert run("-") == ["subjecttype user: created", "subjecttype device: created"]


def test_apply_resources__as_a_program_with_an_invalid_file__non_zero_exit_and_message_on_stderr(tmp_path):
    # Given a real process with its own (empty) database: the file is refused before anything is written
    good = write(tmp_path, "good.yaml", SUBJECT_TYPES)
    bad = write(tmp_path, "bad.yaml", BAD_SPLIT)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'cmd.sqlite3'}", "SECRET_KEY": "test-only"}

    result = subprocess.run(
        [sys.executable, "manage.py", "apply_resources", good, bad],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode != 0
    assert f"{bad}: document 2: spec.variants.0.split" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
