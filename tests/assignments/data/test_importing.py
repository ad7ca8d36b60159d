"""assignments/data/importing.py: `manage.py import_assignments FILE --experiment ID [--atomic]`: backfill of
assignments from a CSV file."""

from __future__ import annotations

import datetime as dt
import io
import threading
from pathlib import Path

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from assignments.data.importing import BATCH_SIZE, ImportInvalid, assignments_import
from assignments.models import Assignment, AssignmentCount, Experiment
from assignments.storage_citus import assignments_distributed
from tests.factories import AssignmentFactory, ExperimentFactory
from tests.helpers.commands import command_output
from tests.helpers.database import lock_waits_query
from tests.helpers.processes import (
    CLOSED_STDOUT_MESSAGE,
    run_manage,
    run_manage_reader_leaves,
    run_manage_stderr_on_terminal,
)
from tests.helpers.resources import apply_resources, experiment, variant
from tests.helpers.server import database_url_for_tests, wait_until

T0 = dt.datetime(2026, 11, 1, 10, 0, 0, tzinfo=dt.UTC)


def csv_file(tmp_path: Path, content: str | bytes, name: str = "backfill.csv") -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", newline="")
    else:
        path.write_bytes(content)
    return path


def import_command(*args: str) -> str:
    return command_output("import_assignments", *args)


def stored(experiment: Experiment) -> dict[str, tuple[str, str, int]]:
    """subject ID -> (variant ID, source, cohort) of the experiment's stored assignments."""
    return {
        subject_id: (variant, source, cohort)
        for subject_id, variant, source, cohort in Assignment.objects.filter(experiment=experiment).values_list(
            "subject_id", "variant__key", "source", "cohort"
        )
    }


def created_at(experiment: Experiment, subject_id: str) -> dt.datetime:
    return Assignment.objects.get(experiment=experiment, subject_id=subject_id).created_at


class Interrupted(Exception):
    """Stands for whatever stops an import half way (a crash, Ctrl-C, a lost connection)."""


def interrupt_after(batches: int):
    """An on_batch callback that stops the import once `batches` batches are written."""
    written = []

    def on_batch(rows: int) -> None:
        written.append(rows)
        if len(written) == batches:
            raise Interrupted

    return on_batch


# Success


def test_import__valid_file__rows_stored_as_imported_and_summary_printed(checkout, tmp_path):
    # Given a file naming variants in any case
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,control\nu2,green\nu3,GREEN\n")

    # When imported
    stdout = import_command(str(path), "--experiment", "checkout-button")

    # Then each row is stored with source `imported`, no reason, in cohort 1, and the summary is printed
    assert stdout == "imported 3, conflicts 0\n"
    assert stored(checkout) == {
        "u1": ("control", "imported", 1),
        "u2": ("Green", "imported", 1),
        "u3": ("Green", "imported", 1),
    }
    assert set(Assignment.objects.values_list("reason", flat=True)) == {""}


def test_import__subject_ids__stored_exactly_as_written(checkout, tmp_path):
    subject_ids = ["  padded  ", "comma,inside", 'quote"inside', "ünïcødé-用户-🙂", "=1+1", "x" * 256]
    quoted = ['"' + subject_id.replace('"', '""') + '"' for subject_id in subject_ids]
    lines = "".join(f"{field},control\n" for field in quoted)
    path = csv_file(tmp_path, "subject_id,variant_id\n" + lines)

    assert import_command(str(path), "--experiment", "checkout-button") == "imported 6, conflicts 0\n"

    assert sorted(stored(checkout)) == sorted(subject_ids)


def test_import__created_at_column__stored_as_the_utc_time_it_names(checkout, tmp_path):
    # Given times with an offset, with Z, without offset (UTC) and a bare date (midnight UTC)
    path = csv_file(
        tmp_path,
        "subject_id,variant_id,created_at\n"
        "offset,control,2026-11-01T12:00:00+02:00\n"
        "zulu,control,2026-11-01T10:00:00.250000Z\n"
        "naive,control,2026-11-01T10:00:00\n"
        "date,control,2026-11-01\n",
    )

    import_command(str(path), "--experiment", "checkout-button")

    assert created_at(checkout, "offset") == T0
    assert created_at(checkout, "zulu") == T0 + dt.timedelta(milliseconds=250)
    assert created_at(checkout, "naive") == T0
    assert created_at(checkout, "date") == dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "content",
    ["subject_id,variant_id\nu1,control\n", "subject_id,variant_id,created_at\nu1,control,\n"],
    ids=["column-absent", "field-empty"],
)
def test_import__created_at_absent_or_empty__time_of_the_import(checkout, tmp_path, content):
    path = csv_file(tmp_path, content)
    before = timezone.now()

    import_command(str(path), "--experiment", "checkout-button")

    assert before <= created_at(checkout, "u1") <= timezone.now()


def test_import__utf8_file_with_byte_order_mark__header_recognised(checkout, tmp_path):
    # As spreadsheet programs save "CSV UTF-8"
    path = csv_file(tmp_path, "\ufeffsubject_id,variant_id\r\nu1,control\r\n")

    assert import_command(str(path), "--experiment", "checkout-button") == "imported 1, conflicts 0\n"
    assert stored(checkout) == {"u1": ("control", "imported", 1)}


def test_import__header_only__nothing_to_import(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n")

    assert import_command(str(path), "--experiment", "checkout-button") == "imported 0, conflicts 0\n"


def test_import__experiment_whose_splits_changed__rows_in_the_current_cohort(demo_config, tmp_path):
    # Given the demo experiment, active, after a change of its splits (cohort 2)
    apply_resources(
        experiment("checkout-button", variants=[variant("control", 0.2, control=True), variant("green", 0.8)])
    )
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,green\n")

    import_command(str(path), "--experiment", "Checkout-Button")

    assert stored(Experiment.objects.get(key="checkout-button")) == {"u1": ("green", "imported", 2)}


def test_import__experiment_id_in_other_case__found(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,control\n")

    import_command(str(path), "--experiment", "CHECKOUT-BUTTON")

    assert list(stored(checkout)) == ["u1"]


# Conflicts


def test_import__subjects_already_assigned__kept_as_they_are_and_counted_as_conflicts(checkout, tmp_path):
    # Given a hashed and a forced assignment stored before the import
    control = checkout.variants.get(key="control")
    AssignmentFactory(experiment=checkout, subject_id="hashed", variant=control, created_at=T0)
    AssignmentFactory(experiment=checkout, subject_id="forced", variant=control, source="forced", reason="QA")

    # When a file assigns them (and a new subject) to another variant
    path = csv_file(tmp_path, "subject_id,variant_id,created_at\nhashed,Green,2027-01-01\nforced,Green,\nnew,Green,\n")
    stdout = import_command(str(path), "--experiment", "checkout-button")

    # Then only the new subject is imported; the stored assignments are untouched
    assert stdout == "imported 1, conflicts 2\n"
    assert stored(checkout) == {
        "hashed": ("control", "hashed", 1),
        "forced": ("control", "forced", 1),
        "new": ("Green", "imported", 1),
    }
    assert created_at(checkout, "hashed") == T0


@pytest.mark.parametrize("batch_size", [BATCH_SIZE, 1], ids=["same-batch", "separate-batches"])
def test_import__subject_twice_in_the_file__first_row_imported_second_a_conflict(checkout, tmp_path, batch_size):
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,Green\nu2,control\nu1,control\n")

    result = assignments_import(path=path, experiment=checkout, atomic=False, batch_size=batch_size)

    assert (result.imported, result.conflicts) == (2, 1)
    assert stored(checkout) == {"u1": ("Green", "imported", 1), "u2": ("control", "imported", 1)}


def test_import__same_file_twice__second_run_all_conflicts(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,control\nu2,Green\n")
    import_command(str(path), "--experiment", "checkout-button")

    assert import_command(str(path), "--experiment", "checkout-button") == "imported 0, conflicts 2\n"
    assert Assignment.objects.count() == 2


# Batches, interruption and --atomic


def test_import__interrupted_after_a_batch__that_batch_stays_and_a_rerun_resumes(checkout, tmp_path):
    # Given a file of five rows imported two at a time, stopped after the first batch
    path = csv_file(tmp_path, "subject_id,variant_id\n" + "".join(f"u{index},control\n" for index in range(5)))
    with pytest.raises(Interrupted):
        assignments_import(path=path, experiment=checkout, atomic=False, batch_size=2, on_batch=interrupt_after(1))

    # Then the first batch was committed
    assert sorted(stored(checkout)) == ["u0", "u1"]

    # When the same file is imported again
    result = assignments_import(path=path, experiment=checkout, atomic=False, batch_size=2)

    # Then it finishes the job: what the first run wrote comes back as conflicts
    assert (result.imported, result.conflicts) == (3, 2)
    assert sorted(stored(checkout)) == [f"u{index}" for index in range(5)]


def test_import__atomic_interrupted_after_a_batch__nothing_written(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n" + "".join(f"u{index},control\n" for index in range(5)))

    with pytest.raises(Interrupted):
        assignments_import(path=path, experiment=checkout, atomic=True, batch_size=2, on_batch=interrupt_after(2))

    assert stored(checkout) == {}
    assert AssignmentCount.objects.aggregate(total=Sum("assignments"))["total"] in (None, 0)


def test_import__more_rows_than_a_batch__all_imported_in_batches(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n" + "".join(f"u{index},Green\n" for index in range(7)))
    batches: list[int] = []

    result = assignments_import(path=path, experiment=checkout, atomic=False, batch_size=3, on_batch=batches.append)

    assert (result.imported, result.conflicts) == (7, 0)
    assert batches == [3, 3, 1]
    assert len(stored(checkout)) == 7


def test_import__atomic_option__imports_and_reports_like_batches(checkout, tmp_path):
    AssignmentFactory(experiment=checkout, subject_id="u1")
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,Green\nu2,Green\nu3,control\n")

    assert import_command(str(path), "--experiment", "checkout-button", "--atomic") == "imported 2, conflicts 1\n"
    assert sorted(stored(checkout)) == ["u1", "u2", "u3"]


# Invalid files: nothing written, every error named by its line

INVALID_FILES = [
    pytest.param(
        "subject_id,variant_id\nok,control\n,control\n", ["line 3: subject_id must not be empty"], id="empty-subject"
    ),
    pytest.param(
        "subject_id,variant_id\nok,control\nu2,purple\n",
        ["line 3: variant_id 'purple' is not a variant of this experiment"],
        id="unknown-variant",
    ),
    pytest.param(
        "subject_id,variant_id\nok,control\nu2,control,2026-11-01\n",
        ["line 3: expected 2 fields, found 3"],
        id="extra-field",
    ),
    pytest.param(
        "subject_id,variant_id,created_at\nok,control,\nu2,control\n",
        ["line 3: expected 3 fields, found 2"],
        id="missing-field",
    ),
    pytest.param(
        "subject_id,variant_id,created_at\nok,control,2026-11-01\nu2,control,yesterday\n",
        ["line 3: created_at: expected an ISO 8601 date or date-time"],
        id="bad-created-at",
    ),
    pytest.param(
        "subject_id,variant_id\nok,control\nu\x072,control\n",
        ["line 3: subject_id must not contain control characters"],
        id="control-character",
    ),
    pytest.param(
        "subject_id,variant_id\nok,control\n" + "x" * 257 + ",control\n",
        ["line 3: subject_id must be at most 256 characters"],
        id="subject-too-long",
    ),
    pytest.param('subject_id,variant_id\nok,control\n"u2"x,control\n', ["line 3: not valid CSV"], id="broken-quoting"),
    pytest.param(
        b"subject_id,variant_id\nok,control\nu\xff2,control\n",
        ["line 3: not UTF-8: byte 0xff in subject_id; save the file as UTF-8"],
        id="not-utf-8",
    ),
    pytest.param(
        # As a spreadsheet saves "CSV" in Latin-1: caf\xe9 is café
        "subject_id,variant_id\ncaf\xe9,control\nok,contr\xf4l\n".encode("latin-1"),
        ["line 2: not UTF-8: byte 0xe9 in subject_id", "line 3: not UTF-8: byte 0xf4 in variant_id"],
        id="latin-1",
    ),
    pytest.param(b"", ["line 1: the file is empty"], id="empty-file"),
    pytest.param(
        "subject,variant\nok,control\n",
        ["line 1: the header must be subject_id,variant_id or subject_id,variant_id,created_at"],
        id="bad-header",
    ),
    pytest.param("ok,control\n", ["line 1: the header must be"], id="no-header"),
    pytest.param("subject_id;variant_id\nok;control\n", ["line 1: the header must be"], id="semicolons"),
]


@pytest.mark.parametrize(("content", "expected_errors"), INVALID_FILES)
def test_import__invalid_file__error_names_the_line_and_nothing_is_written(
    checkout, tmp_path, content, expected_errors
):
    path = csv_file(tmp_path, content)
    stdout = io.StringIO()

    with pytest.raises(CommandError) as raised:
        call_command("import_assignments", str(path), "--experiment", "checkout-button", stdout=stdout)

    message = str(raised.value)
    assert message.startswith(f"{path}: nothing imported")
    error_lines = message.splitlines()[1:]
    assert len(error_lines) == len(expected_errors)
    for line, expected in zip(error_lines, expected_errors, strict=True):
        assert line.startswith(expected)
    assert stdout.getvalue() == ""
    assert Assignment.objects.count() == 0


def test_import__errors_on_several_lines__each_listed_in_line_order(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n,control\nok,control\nu3,purple\nu4\n")

    with pytest.raises(CommandError) as raised:
        import_command(str(path), "--experiment", "checkout-button")

    assert str(raised.value) == (
        f"{path}: nothing imported, 3 error(s):\n"
        "line 2: subject_id must not be empty\n"
        "line 4: variant_id 'purple' is not a variant of this experiment\n"
        "line 5: expected 2 fields, found 1; variant_id '' is not a variant of this experiment"
    )
    assert Assignment.objects.count() == 0


def test_import__error_on_the_last_line_of_a_long_file__no_batch_written(checkout, tmp_path):
    # Given valid rows filling several batches, then one bad line
    rows = "".join(f"u{index},control\n" for index in range(10))
    path = csv_file(tmp_path, "subject_id,variant_id\n" + rows + "u10,purple\n")

    # When imported in batches of 3
    with pytest.raises(ImportInvalid) as raised:
        assignments_import(path=path, experiment=checkout, atomic=False, batch_size=3)

    # Then the whole file was checked first: nothing is stored
    assert raised.value.errors == ["line 12: variant_id 'purple' is not a variant of this experiment"]
    assert Assignment.objects.count() == 0


def test_import__more_than_fifty_bad_lines__first_fifty_listed_then_how_many_more(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n" + "".join(f"u{index},purple\n" for index in range(60)))

    with pytest.raises(CommandError) as raised:
        import_command(str(path), "--experiment", "checkout-button")

    lines = str(raised.value).splitlines()
    assert lines[0] == f"{path}: nothing imported, 60 error(s):"
    assert [line.split(":")[0] for line in lines[1:51]] == [f"line {number}" for number in range(2, 52)]
    assert lines[51:] == ["... and 10 more"]


def test_import__ended_experiment__backfilled_like_any_other(db, tmp_path):
    ended = ExperimentFactory(key="old-test", status=Experiment.Status.ENDED)
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,treatment\n")

    assert import_command(str(path), "--experiment", "old-test") == "imported 1, conflicts 0\n"
    assert stored(ended) == {"u1": ("treatment", "imported", 1)}


def test_import__variant_of_another_experiment__rejected(checkout, tmp_path):
    ExperimentFactory(key="banner", splits=[("control", 0.5), ("wide", 0.5)])
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,wide\n")

    with pytest.raises(CommandError, match="line 2: variant_id 'wide' is not a variant of this experiment"):
        import_command(str(path), "--experiment", "checkout-button")


def test_import__unknown_experiment__command_error(db, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,control\n")

    with pytest.raises(CommandError, match="no experiment has the ID 'missing'"):
        import_command(str(path), "--experiment", "missing")


def test_import__holdout__refused_before_reading_the_file_and_nothing_stored(holdout_members, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\nu9,held_out\n")

    with pytest.raises(CommandError) as caught:
        import_command(str(path), "--experiment", "h1")

    assert str(caught.value) == "nothing imported: 'h1' is a holdout: its members are drawn, never imported"
    assert Assignment.objects.filter(experiment=holdout_members).count() == 3


def test_import__missing_file__command_error_naming_it(checkout, tmp_path):
    with pytest.raises(CommandError, match=r"cannot read .*nowhere\.csv: No such file or directory"):
        import_command(str(tmp_path / "nowhere.csv"), "--experiment", "checkout-button")


def test_import__created_at_outside_the_datetime_range_in_utc__rejected_by_the_validation(checkout, tmp_path):
    # 0001-01-01T00:00:00+01:00 is 31 December of year 0 (1 BC) in UTC; 9999-12-31T23:00:00-05:00 is in year 10000
    path = csv_file(
        tmp_path,
        "subject_id,variant_id,created_at\n"
        "valid,control,2026-11-01\n"
        "early,control,0001-01-01T00:00:00+01:00\n"
        "late,control,9999-12-31T23:00:00-05:00\n",
    )

    with pytest.raises(ImportInvalid) as raised:
        assignments_import(path=path, experiment=checkout, atomic=False, batch_size=1)

    assert [error.split(":")[0] for error in raised.value.errors] == ["line 3", "line 4"]
    assert Assignment.objects.count() == 0


def api_insert_order(subject_ids: list[str]) -> list[str]:
    """The order an API batch inserts these subjects in: by subject ID, and on Citus shard by shard first
    (a multi-shard insert visits its shards in order, docs/how-to/scale-out-citus.md)."""
    if not assignments_distributed():
        return sorted(subject_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s, get_shard_id_for_distribution_column('assignments_assignment', s) FROM unnest(%s::text[]) s",
            [subject_ids],
        )
        shards = dict(cursor.fetchall())
    return sorted(subject_ids, key=lambda subject_id: (shards[subject_id], subject_id))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_import__concurrent_api_batch_over_the_same_subjects__no_deadlock(checkout, tmp_path):
    # Given a file listing two subjects in the reverse of the order an API batch inserts them in, and a
    # concurrent transaction that, like such a batch, has inserted the first and not yet the second
    first, second = api_insert_order(["a", "z"])
    path = csv_file(tmp_path, f"subject_id,variant_id\n{second},Green\n{first},Green\n")
    variant = checkout.variants.get(key="control").pk
    insert = (
        "INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at) "
        "VALUES (%s, %s, %s, 1, now()) ON CONFLICT DO NOTHING"
    )
    api_like = psycopg.connect(database_url_for_tests())
    watcher = psycopg.connect(database_url_for_tests(), autocommit=True)
    api_like.execute(insert, [checkout.pk, first, variant])
    failures: list[BaseException] = []

    def api_batch_goes_on() -> None:
        # Once the import waits for a lock (on the first, or on the second if it sorted), the API batch
        # inserts the second and commits.
        try:
            wait_until(lambda: watcher.execute(lock_waits_query()).fetchone()[0] > 0, timeout=20)
            api_like.execute(insert, [checkout.pk, second, variant])
            api_like.commit()
        except BaseException as exc:
            failures.append(exc)
            api_like.rollback()

    thread = threading.Thread(target=api_batch_goes_on)
    thread.start()
    try:
        # When the file is imported meanwhile
        result = assignments_import(path=path, experiment=checkout, atomic=False)
    finally:
        thread.join(timeout=30)
        api_like.close()
        watcher.close()

    # Then both finish: every subject has one assignment, from one or the other
    assert failures == []
    assert result.imported + result.conflicts == 2
    assert sorted(stored(checkout)) == ["a", "z"]


# As a process


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_import_process__success__exit_0_summary_on_stdout_and_nothing_on_piped_stderr(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n" + "".join(f"u{index},control\n" for index in range(50)))

    result = run_manage("import_assignments", str(path), "--experiment", "checkout-button")

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"imported 50, conflicts 0\n"
    assert result.stderr == b""  # no progress bar: stderr is a pipe
    assert Assignment.objects.filter(experiment=checkout).count() == 50


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_import_process__invalid_file__exit_1_errors_on_stderr_no_traceback(checkout, tmp_path):
    path = csv_file(tmp_path, b"subject_id,variant_id\nok,control\n,control\nu\xff3,control\n")

    result = run_manage("import_assignments", str(path), "--experiment", "checkout-button")

    assert result.returncode == 1
    assert result.stdout == b""
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr
    assert "line 3: subject_id must not be empty" in stderr
    assert "line 4: not UTF-8: byte 0xff in subject_id" in stderr
    assert Assignment.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        pytest.param(["--experiment", "missing"], 1, id="unknown-experiment"),
        pytest.param([], 2, id="no-experiment-option"),
        pytest.param(["--experiment", "checkout-button", "--bogus"], 2, id="unknown-option"),
    ],
)
def test_import_process__bad_arguments__non_zero_exit_message_no_traceback(checkout, tmp_path, args, exit_code):
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,control\n")

    result = run_manage("import_assignments", str(path), *args)

    assert result.returncode == exit_code
    assert result.stdout == b""
    assert result.stderr.strip()
    assert b"Traceback" not in result.stderr
    assert Assignment.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_import_process__stderr_a_terminal__progress_bar_drawn_there(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n" + "".join(f"u{index},control\n" for index in range(50)))

    result = run_manage_stderr_on_terminal("import_assignments", str(path), "--experiment", "checkout-button")

    assert result.returncode == 0
    assert result.stdout == b"imported 50, conflicts 0\n"
    assert b"importing" in result.terminal


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_import_process__reader_closes_stdout_at_once__exit_1_short_message(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\nu1,control\n")

    result = run_manage_reader_leaves("import_assignments", str(path), "--experiment", "checkout-button", lines=0)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == CLOSED_STDOUT_MESSAGE


def test_import__empty_lines__skipped(checkout, tmp_path):
    path = csv_file(tmp_path, "subject_id,variant_id\n\nu-1,control\n\n")

    assert import_command(str(path), "--experiment", "checkout-button") == "imported 1, conflicts 0\n"
    assert stored(checkout) == {"u-1": ("control", "imported", 1)}
