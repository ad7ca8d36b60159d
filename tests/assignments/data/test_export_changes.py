"""`manage.py export_changes` and `manage.py prune_changes`: the change feed as files, and its retention."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError
from django.test import override_settings

from assignments.data.deleting import assignments_delete
from assignments.data.forcing import assignments_force
from assignments.management.commands.export_changes import CSV_COLUMNS
from assignments.models import AssignmentChange, ChangeMark, Experiment
from tests.factories import ExperimentFactory, SubjectTypeFactory
from tests.helpers.api import ApiClient
from tests.helpers.assignments import assignments_bulk_store
from tests.helpers.changes import FEED_DB, feed_read
from tests.helpers.commands import command_output, command_streams
from tokens.models import Role
from tokens.services import api_token_create

pytestmark = FEED_DB


@pytest.fixture
def checkout() -> Experiment:
    user = SubjectTypeFactory(key="user")
    SubjectTypeFactory(key="cookie")
    return ExperimentFactory(key="checkout", subject_type=user, splits=[("control", 0.5), ("green", 0.5)])


@pytest.fixture
def admin_api() -> ApiClient:
    return ApiClient(api_token_create(name="export-admin", role=Role.ADMIN)[1])


def assign(api: ApiClient, *subject_ids: str) -> None:
    response = api.post("/experiment-assignments", {"experiment_id": "checkout", "subject_ids": list(subject_ids)})
    assert response.status_code == 200, response.content


def link(api: ApiClient, cookie: str, user: str) -> None:
    identifiers = [{"subject_type": "cookie", "subject_id": cookie}, {"subject_type": "user", "subject_id": user}]
    assert api.post("/id-link", {"identifiers": identifiers}).status_code == 200


def export(*args: str) -> tuple[list[dict], str]:
    """The JSON Lines export_changes writes with args, and the cursor it prints."""
    stdout, stderr = command_streams("export_changes", *args)
    assert stderr.startswith("next cursor: ") and stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    return [json.loads(line) for line in stdout.splitlines()], stderr.removeprefix("next cursor: ").strip()


def subjects(changes: list[dict]) -> list[str]:
    return [change["assignment"]["subject_id"] for change in changes]


def test_jsonl_is_the_feed_itself_and_the_cursor_is_its_next(admin_api, checkout):
    assign(admin_api, "u-1", "u-2")
    link(admin_api, "c-1", "u-1")

    written, cursor = export()

    assert written == feed_read(admin_api)
    assert cursor == written[-1]["cursor"]


def test_csv_flattens_each_kind_leaving_the_fields_it_lacks_empty(admin_api, checkout):
    assign(admin_api, "u-1")
    link(admin_api, "c-1", "u-1")

    rows = list(csv.DictReader(io.StringIO(command_streams("export_changes", "--format", "csv")[0])))

    assert list(rows[0]) == list(CSV_COLUMNS)
    assignment, linked = rows
    assert assignment["kind"] == "assignment.created" and assignment["subject_id"] == "u-1"
    assert assignment["subject_type_a"] == assignment["subject_id_b"] == ""
    # A link's sides in canonical order: here the user's type was made first.
    assert linked["kind"] == "link.created" and linked["subject_id_a"] == "u-1" and linked["subject_id_b"] == "c-1"
    assert linked["experiment_id"] == linked["variant_id"] == linked["cohort"] == ""
    assert linked["created_at"].endswith("Z")


def test_limit_writes_at_most_that_many_and_the_next_run_goes_on_from_there(admin_api, checkout):
    assign(admin_api, *(f"u-{n}" for n in range(5)))

    first, cursor = export("--limit", "3")
    rest, last = export("--after", cursor)
    nothing, unchanged = export("--after", last, "--limit", "0")

    assert len(first) == 3 and len(rest) == 2 and nothing == []
    assert sorted(subjects(first + rest)) == [f"u-{n}" for n in range(5)]
    assert unchanged == last


def test_a_page_boundary_inside_a_batch_loses_nothing(checkout):
    assignments_bulk_store(checkout, 10_050, prefix="bulk")

    written, _ = export()

    assert len(written) == len({change["cursor"] for change in written}) == 10_050


def test_the_cursor_file_neither_skips_nor_repeats_across_runs_and_failed_runs(admin_api, checkout, tmp_path):
    cursor_file, batch = tmp_path / "changes.cursor", tmp_path / "batch.jsonl"
    job = ("export_changes", "--cursor-file", str(cursor_file), "--output", str(batch))
    assign(admin_api, "u-1")
    command_streams(*job)
    first = batch.read_text().splitlines()
    assign(admin_api, "u-2")
    # A run that cannot write its output leaves the cursor as it was.
    with pytest.raises(CommandError, match="cannot write"):
        command_streams("export_changes", "--cursor-file", str(cursor_file), "--output", str(tmp_path / "no/x"))
    assign(admin_api, "u-3")
    command_streams(*job)
    second = batch.read_text().splitlines()
    command_streams(*job)

    assert subjects([json.loads(line) for line in first]) == ["u-1"]
    assert subjects([json.loads(line) for line in second]) == ["u-2", "u-3"]
    assert batch.read_text() == ""
    assert cursor_file.read_text() == json.loads(second[-1])["cursor"] + "\n"


@pytest.mark.parametrize("cursor", ["nonsense", "c1.zz.0.0"])
def test_a_malformed_cursor_exits_2(checkout, cursor, tmp_path):
    with pytest.raises(CommandError, match="is not a cursor") as refused:
        export("--after", cursor)
    assert refused.value.returncode == 2
    (tmp_path / "c").write_text(cursor + "\n")
    with pytest.raises(CommandError, match="is not a cursor"):
        export("--cursor-file", str(tmp_path / "c"))


def test_an_expired_cursor_exits_2_naming_a_full_export(admin_api, checkout):
    assign(admin_api, "u-1")
    _, old = export()
    assign(admin_api, "u-2")
    with override_settings(CHANGES_RETENTION_DAYS=0):
        command_output("prune_changes")
        with pytest.raises(CommandError, match="export_assignments") as refused:
            export("--after", old)
    assert refused.value.returncode == 2


def test_prune_drops_the_expired_log_in_batches_and_keeps_the_floors_mark(admin_api, checkout):
    assignments_force(experiment=checkout, variant_id="green", subject_ids=["a", "b", "c"], reason="QA", replace=False)
    Experiment.objects.filter(pk=checkout.pk).update(status=Experiment.Status.ENDED)
    assignments_delete(experiment=checkout)
    assert AssignmentChange.objects.count() == 6
    with override_settings(CHANGES_RETENTION_DAYS=1):
        kept = command_output("prune_changes", "--batch-size", "4")
    with override_settings(CHANGES_RETENTION_DAYS=0):
        expired = command_output("prune_changes", "--batch-size", "4")
        dropped = command_output("prune_changes", "--batch-size", "4")

    assert kept.startswith("dropped 0 logged changes older than 1 days")
    assert expired.startswith("dropped 6 logged changes older than 0 days; the feed starts after c1.")
    assert dropped.startswith("dropped 0 ") and AssignmentChange.objects.count() == 0
    assert ChangeMark.objects.count() == 1
    assert feed_read(admin_api) == []
