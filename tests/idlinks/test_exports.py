"""idlinks/exports.py: `manage.py export_id_links [--format csv|jsonl] [--since ISO8601] [--output FILE]`: identifier
links, streamed."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from django.core.management import CommandError, call_command
from django.db import DataError, connection

from core.exports import CHUNK_SIZE
from idlinks.models import IdentifierLink
from tests.factories import IdentifierLinkFactory
from tests.helpers.commands import command_streams
from tests.helpers.exports import SINCE_CASES, SINCE_ROWS, CursorProbe, csv_rows
from tests.helpers.processes import run_manage, run_manage_piped_to_head, run_manage_stderr_on_terminal

HEADER = "subject_type_a,subject_id_a,subject_type_b,subject_id_b,created_at\n"
COLUMNS = HEADER.strip().split(",")
T0 = dt.datetime(2026, 11, 1, 10, 0, 0, tzinfo=dt.UTC)


def export(*args: str) -> tuple[str, str]:
    return command_streams("export_id_links", *args)


def add_link(subject_types, type_a: str, id_a: str, type_b: str, id_b: str, created_at: dt.datetime):
    return IdentifierLinkFactory(
        subject_type_a=subject_types[type_a],
        subject_id_a=id_a,
        subject_type_b=subject_types[type_b],
        subject_id_b=id_b,
        created_at=created_at,
    )


def bulk_links(subject_types, count: int, *, start: dt.datetime = T0) -> None:
    """count user-user links a second apart: a-000000 - b-000000, ..."""
    user = subject_types["user"]
    IdentifierLink.objects.bulk_create(
        IdentifierLink(
            subject_type_a=user,
            subject_id_a=f"a-{index:06d}",
            subject_type_b=user,
            subject_id_b=f"b-{index:06d}",
            created_at=start + dt.timedelta(seconds=index),
        )
        for index in range(count)
    )


def test_export_id_links__csv_default__header_then_links_oldest_first_with_types_as_configured(subject_types):
    # Given links stored out of time order, one across subject types (user was created before Cookie)
    add_link(subject_types, "user", "u-2", "cookie", "c-9", T0 + dt.timedelta(days=1))
    add_link(subject_types, "user", "u-1", "user", "u-3", T0)
    add_link(subject_types, "device", "d-1", "device", "d-2", T0 + dt.timedelta(microseconds=1))

    # When exported without options
    stdout, stderr = export()

    # Then stdout holds the CSV alone, as stored (side a, side b), subject types by their configured IDs
    assert stderr == ""
    assert stdout == (
        HEADER + "user,u-1,user,u-3,2026-11-01T10:00:00.000000Z\n"
        "device,d-1,device,d-2,2026-11-01T10:00:00.000001Z\n"
        "user,u-2,Cookie,c-9,2026-11-02T10:00:00.000000Z\n"
    )


def test_export_id_links__same_timestamp__ordered_by_storage_order(subject_types):
    for subject_id in ["z", "a", "m"]:
        add_link(subject_types, "user", f"{subject_id}-1", "user", f"{subject_id}-2", T0)

    stdout, _ = export()

    assert [row[1] for row in csv_rows(stdout)[1:]] == ["z-1", "a-1", "m-1"]


def test_export_id_links__jsonl__one_object_per_line_keys_in_column_order_unicode_unescaped(subject_types):
    add_link(subject_types, "user", "ünï 🙂", "cookie", 'c,"1"', T0)

    stdout, _ = export("--format", "jsonl")

    assert stdout == (
        '{"subject_type_a": "user", "subject_id_a": "ünï 🙂", "subject_type_b": "Cookie", '
        '"subject_id_b": "c,\\"1\\"", "created_at": "2026-11-01T10:00:00.000000Z"}\n'
    )
    assert list(json.loads(stdout)) == COLUMNS


def test_export_id_links__awkward_subject_ids__csv_reads_back_exactly(subject_types):
    awkward = ["comma,inside", 'quote"inside', "  padded  ", "=1+1", "x" * 256]
    for index, subject_id in enumerate(awkward):
        add_link(subject_types, "user", subject_id, "cookie", f"c-{index}", T0 + dt.timedelta(seconds=index))

    stdout, _ = export()

    rows = csv_rows(stdout)
    assert [row[1] for row in rows[1:]] == awkward
    assert len(stdout.splitlines()) == len(awkward) + 1


def test_export_id_links__spreadsheet_safe__formula_ids_on_either_side_prefixed_others_exact(subject_types):
    add_link(subject_types, "user", "=1+1", "cookie", "@c", T0)
    add_link(subject_types, "user", "u-1", "cookie", "-c", T0 + dt.timedelta(seconds=1))

    exact, _ = export()
    safe, _ = export("--spreadsheet-safe")

    assert [(row[1], row[3]) for row in csv_rows(exact)[1:]] == [("=1+1", "@c"), ("u-1", "-c")]
    assert [(row[1], row[3]) for row in csv_rows(safe)[1:]] == [("'=1+1", "'@c"), ("u-1", "'-c")]
    assert [row[4] for row in csv_rows(safe)[1:]] == [row[4] for row in csv_rows(exact)[1:]]


def test_export_id_links__spreadsheet_safe_with_jsonl__refused_as_a_bad_option(subject_types):
    with pytest.raises(CommandError, match="--spreadsheet-safe applies to --format csv only") as refused:
        export("--format", "jsonl", "--spreadsheet-safe")

    assert refused.value.returncode == 2


def test_export_id_links__no_links__csv_header_only_and_jsonl_empty(subject_types):
    assert export()[0] == HEADER
    assert export("--format", "jsonl")[0] == ""


@pytest.mark.parametrize(
    ("since", "expected"), [*SINCE_CASES, ("2026-11-01T10:00:00.000001Z", ["at-11:00", "next-day"])]
)
def test_export_id_links__since__keeps_links_made_at_or_after_it(subject_types, since, expected):
    for subject_id, moment in SINCE_ROWS:
        add_link(subject_types, "user", subject_id, "cookie", f"c-{subject_id}", moment)

    stdout, _ = export("--since", since)

    assert [row[1] for row in csv_rows(stdout)[1:]] == expected


@pytest.mark.parametrize("since", ["yesterday", "2026-13-01", "2026-11-01T25:00", ""])
def test_export_id_links__malformed_since__error_names_the_option(subject_types, since):
    with pytest.raises(CommandError, match="--since"):
        export("--since", since)


@pytest.mark.parametrize("since", ["9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+01:00"])
def test_export_id_links__since_outside_the_datetime_range_in_utc__error_names_the_option(subject_types, since):
    add_link(subject_types, "user", "u-1", "cookie", "c-1", T0)

    with pytest.raises(CommandError, match="--since"):
        export("--since", since)


def test_export_id_links__output_file__replaced_and_summary_alone_on_stdout(subject_types, tmp_path):
    # Given links and an older export at the destination
    add_link(subject_types, "user", "ünï,1", "cookie", "c-1", T0)
    add_link(subject_types, "user", "u-2", "cookie", "c-2", T0 + dt.timedelta(seconds=1))
    destination = tmp_path / "links.csv"
    destination.write_text("old content\n")

    # When exported into it
    stdout, stderr = export("--output", str(destination))

    # Then it holds what stdout would have held, UTF-8; stdout has the summary only; no temporary file is left
    assert stdout == f"exported 2 identifier links to {destination}\n"
    assert stderr == ""
    assert destination.read_text(encoding="utf-8") == export()[0]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["links.csv"]


def test_export_id_links__output_jsonl_since__counts_only_what_it_wrote(subject_types, tmp_path):
    add_link(subject_types, "user", "old", "cookie", "c-1", T0)
    add_link(subject_types, "user", "new", "cookie", "c-2", T0 + dt.timedelta(days=1))
    destination = tmp_path / "links.jsonl"

    stdout, _ = export("--format", "jsonl", "--since", "2026-11-02", "--output", str(destination))

    assert stdout == f"exported 1 identifier links to {destination}\n"
    assert [json.loads(line)["subject_id_a"] for line in destination.read_text().splitlines()] == ["new"]


def test_export_id_links__output_is_a_directory__error_and_no_partial_file_left(subject_types, tmp_path):
    # Given a directory where the file should go (the rename at the end fails, after every row was written)
    add_link(subject_types, "user", "u-1", "cookie", "c-1", T0)
    destination = tmp_path / "links.csv"
    destination.mkdir()

    with pytest.raises(CommandError, match=r"cannot write .*links\.csv"):
        export("--output", str(destination))

    assert [path.name for path in tmp_path.iterdir()] == ["links.csv"]
    assert list(destination.iterdir()) == []


def test_export_id_links__output_in_missing_directory__command_error_naming_the_file(subject_types, tmp_path):
    with pytest.raises(CommandError, match=r"cannot write .*out\.csv: No such file or directory"):
        export("--output", str(tmp_path / "no-such-dir" / "out.csv"))

    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_export_id_links__read_fails_half_way__previous_file_kept_and_no_partial_file(subject_types, tmp_path):
    # Given more links than one fetch, then one whose time Python cannot represent (PostgreSQL's infinity)
    bulk_links(subject_types, CHUNK_SIZE + 10)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO idlinks_identifierlink (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, "
            "created_at) VALUES (%s, 'y', %s, 'z', 'infinity')",
            [subject_types["user"].pk, subject_types["user"].pk],
        )
    destination = tmp_path / "links.csv"
    destination.write_text("previous export\n")

    # When exported to that file and to a new one, the read fails after the first chunk was written out
    with pytest.raises(DataError):
        export("--output", str(destination))
    with pytest.raises(DataError):
        export("--output", str(tmp_path / "new.csv"))

    # Then the previous export is intact, the new file does not exist, and no partial file is left
    assert destination.read_text() == "previous export\n"
    assert [path.name for path in tmp_path.iterdir()] == ["links.csv"]


@pytest.mark.postgres
@pytest.mark.single_node("streams through one server-side cursor; on Citus the export reads pages (time_ordered)")
@pytest.mark.django_db(transaction=True)
def test_export_id_links__many_links_on_postgresql__streamed_through_a_cursor_without_hold(subject_types):
    # Given more links than two fetches hold, committed (no test transaction around the command)
    count = 2 * CHUNK_SIZE + 500
    bulk_links(subject_types, count)
    probe = CursorProbe()

    # When exported as JSON Lines (the first write is a row) in autocommit mode, as from the command line
    call_command("export_id_links", "--format", "jsonl", stdout=probe)

    # Then the rows came through one open server-side cursor over the links, not declared WITH HOLD
    assert probe.held("identifierlink") is False
    # And every link arrived, oldest first
    objects = probe.json_lines()
    assert [obj["subject_id_a"] for obj in objects] == [f"a-{index:06d}" for index in range(count)]


# As a process


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export_id_links_process__success_and_bad_input__exit_codes_and_streams(subject_types, tmp_path):
    # Given committed links
    bulk_links(subject_types, 3)
    destination = tmp_path / "links.csv"

    # When the command runs as a process: to stdout, to a file, and with bad options
    to_stdout = run_manage("export_id_links")
    to_file = run_manage("export_id_links", "--output", str(destination))
    bad_since = run_manage("export_id_links", "--since", "soon")
    bad_format = run_manage("export_id_links", "--format", "xml")
    bad_output = run_manage("export_id_links", "--output", str(tmp_path / "missing" / "links.csv"))

    # Then success exits 0 with the data alone on stdout, and nothing on stderr (a pipe: no progress bar)
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert to_stdout.stderr == b""
    assert to_stdout.stdout.decode() == (
        HEADER + "user,a-000000,user,b-000000,2026-11-01T10:00:00.000000Z\n"
        "user,a-000001,user,b-000001,2026-11-01T10:00:01.000000Z\n"
        "user,a-000002,user,b-000002,2026-11-01T10:00:02.000000Z\n"
    )
    assert to_file.returncode == 0
    assert to_file.stderr == b""
    assert to_file.stdout.decode() == f"exported 3 identifier links to {destination}\n"
    assert destination.read_bytes() == to_stdout.stdout
    # And bad input exits non-zero, with a message on stderr, no traceback and nothing on stdout
    for failed, code in [(bad_since, 2), (bad_format, 2), (bad_output, 1)]:
        assert failed.returncode == code
        assert failed.stdout == b""
        assert b"Traceback" not in failed.stderr
    assert b"argument --since" in bad_since.stderr
    assert b"argument --format" in bad_format.stderr
    assert b"cannot write" in bad_output.stderr
    assert [path.name for path in tmp_path.iterdir()] == ["links.csv"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export_id_links_process__piped_to_head__stops_quietly_exit_0(subject_types):
    # Given far more links than a pipe buffers
    bulk_links(subject_types, 5000)

    # When the reader takes the header and goes away: `export_id_links | head -1`, under pipefail
    result = run_manage_piped_to_head("export_id_links", lines=1)

    # Then the command stops there as `git log | head` does: its own exit status 0, nothing on stderr
    assert (result.returncode, result.stderr) == (0, b"")
    assert result.stdout == HEADER.encode()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export_id_links_process__stderr_a_terminal__progress_bar_there_and_data_alone_on_stdout(subject_types):
    bulk_links(subject_types, 50)

    result = run_manage_stderr_on_terminal("export_id_links")

    assert result.returncode == 0
    assert result.stdout.decode().splitlines()[0] == HEADER.strip()
    assert len(result.stdout.decode().splitlines()) == 51
    assert b"exporting" in result.terminal


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export_id_links_process__output_file__mode_from_the_umask(subject_types, tmp_path):
    bulk_links(subject_types, 1)
    previous = os.umask(0o027)
    try:
        result = run_manage("export_id_links", "--output", str(tmp_path / "links.csv"))
    finally:
        os.umask(previous)

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "links.csv").stat().st_mode & 0o777 == 0o640
