"""docs/how-to/keep-a-warehouse-copy.md against a real copy: the page's full copy, job and PostgreSQL statements,
run as written on a second database of the test server, keep a copy equal to the service's assignments and links
through creations, links, an import, forced and replaced assignments, deletions, a late commit and a failed run;
and a cursor that has expired stops the job."""

from __future__ import annotations

import datetime as dt
import io
import re
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from assignments.data.deleting import assignments_delete
from assignments.data.forcing import assignments_force
from assignments.models import Assignment, Experiment
from idlinks.models import IdentifierLink
from tests.helpers import PROJECT_DIR
from tests.helpers.api import ApiClient
from tests.helpers.processes import manage_env
from tests.helpers.resources import apply_resources, experiment, holdout, subject_type, variant
from tests.helpers.server import database_url_for_tests
from tokens.models import Role
from tokens.services import api_token_create

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.single_node("creates the copy's database on the one server the tests use"),
    # The feed serves a change once its transaction has ended, and the job's processes read committed rows only.
    pytest.mark.django_db(transaction=True),
]

PAGE = PROJECT_DIR / "docs" / "how-to" / "keep-a-warehouse-copy.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# A crontab line: five schedule fields, then the command.
CRON_LINE = re.compile(r"^(?:\S+ ){5}(.+)$", re.MULTILINE)
# Subject IDs a copy must carry exactly: a backslash and a double quote (which PostgreSQL's COPY text and CSV
# formats would read), a quote and a comma, and U+2028 (a line separator to str.splitlines()).
ODD_SUBJECTS = ['back\\slash"quote', "o'brien, jr", "line\u2028sep"]
# How long the copy may take to catch up when another session of the server holds the feed's horizon back.
CATCH_UP_SECONDS = 30


@dataclass(frozen=True)
class WarehousePage:
    """What the page says to run, as it says it."""

    take_cursor: str  # step 1, up to the cursor
    export_all: str  # step 1, the rest
    job: str  # step 2: the job's script
    job_file: str  # ...and where it is saved
    job_cron: str  # step 2: the command of the job's crontab line, with CHECKOUT in it
    prune_cron: str  # step 2: the command of prune_changes' crontab line
    apply_file: str  # the SQL file the job runs with psql
    merge: str  # step 3: the MERGE statements
    tables: str  # PostgreSQL: the copy tables
    loading: str  # PostgreSQL: the statements that load the batch as `batch`


def section(text: str, heading: str) -> str:
    """The page's text from the heading that starts with `heading` to the next one of its level or above."""
    found = re.search(rf"^(#+) {re.escape(heading)}.*$", text, re.MULTILINE)
    assert found, f"{PAGE.name}: no heading starting with {heading!r}"
    level = len(found.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(text, found.end())
    return text[found.end() : end.start() if end else len(text)]


def blocks(text: str, language: str, *, containing: str) -> list[str]:
    found = [body for lang, body in BLOCK.findall(text) if lang == language and containing in body]
    assert found, f"{PAGE.name}: no ```{language} block with {containing!r} where expected"
    return found


def the_block(text: str, language: str, *, containing: str) -> str:
    found = blocks(text, language, containing=containing)
    assert len(found) == 1, f"{PAGE.name}: {len(found)} ```{language} blocks with {containing!r}, expected one"
    return found[0]


def cron_command(text: str, *, running: str) -> str:
    commands = [command for command in CRON_LINE.findall(text) if running in command]
    assert len(commands) == 1, f"{PAGE.name}: no single crontab line running {running!r}"
    return commands[0]


def page_read() -> WarehousePage:
    text = PAGE.read_text(encoding="utf-8")
    full = the_block(section(text, "1. "), "sh", containing="export_assignments")
    lines = full.splitlines(keepends=True)
    cut = next((n for n, line in enumerate(lines) if "export_changes" in line), None)
    assert cut is not None, f"{PAGE.name}: step 1 takes no cursor with export_changes"
    schedule = section(text, "2. ")
    job = the_block(schedule, "sh", containing="export_changes")
    saved = re.search(r"Save as `(\S+\.sh)`", schedule)
    assert saved, f"{PAGE.name}: step 2 says nowhere where to save the job"
    crontab = the_block(schedule, "crontab", containing=saved.group(1))
    applied = re.search(r"psql .*-f (\S+\.sql)", job)
    assert applied, f"{PAGE.name}: the job runs no SQL file with psql -f"
    postgres = section(text, "PostgreSQL")
    return WarehousePage(
        take_cursor="".join(lines[: cut + 1]),
        export_all="".join(lines[cut + 1 :]),
        job=job,
        job_file=saved.group(1),
        job_cron=cron_command(crontab, running=saved.group(1)),
        prune_cron=cron_command(crontab, running="prune_changes"),
        apply_file=applied.group(1),
        merge=the_block(section(text, "3. "), "sql", containing="MERGE INTO assignments"),
        tables=the_block(postgres, "sql", containing="CREATE TABLE assignments"),
        loading=the_block(postgres, "sql", containing="\\copy"),
    )


def superuser() -> psycopg.Connection:
    return psycopg.connect(**{**connection.get_connection_params(), "dbname": "postgres"}, autocommit=True)


@pytest.fixture
def copy_database() -> str:
    """A database of this test's own on the test server, for the warehouse copy; dropped afterwards."""
    name = f"warehouse_test_{uuid.uuid4().hex[:12]}"
    with superuser() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with superuser() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_url(name: str) -> str:
    return database_url_for_tests().rsplit("/", 1)[0] + "/" + name


@dataclass(frozen=True)
class JobRun:
    returncode: int
    output: str


@dataclass
class Checkout:
    """A directory that passes for the checkout: the project's manage.py and virtual environment, a var/ of its
    own, the page's files saved in it, and the environment the page's commands run with."""

    path: Path
    page: WarehousePage
    env: dict[str, str]

    def run(self, script: str, *, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", script],
            cwd=self.path,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def succeed(self, script: str, **options) -> subprocess.CompletedProcess:
        result = self.run(script, **options)
        assert result.returncode == 0, f"{script}\nexit {result.returncode}: {result.stderr}"
        return result

    def job(self, **options) -> JobRun:
        """One run of the job, as its crontab line runs it; what it printed, to the log the line appends to if
        it names one."""
        logs = [self.path / name for name in re.findall(r">>\s*(\S+)", self.page.job_cron)]
        before = {log: log.stat().st_size if log.exists() else 0 for log in logs}
        result = self.run(self.page.job_cron.replace("CHECKOUT", shlex.quote(str(self.path))), **options)
        appended = "".join(log.read_bytes()[before[log] :].decode("utf-8") for log in logs if log.exists())
        return JobRun(result.returncode, result.stdout + result.stderr + appended)

    def prune(self, **options) -> subprocess.CompletedProcess:
        return self.succeed(self.page.prune_cron.replace("CHECKOUT", shlex.quote(str(self.path))), **options)

    def full_copy(self, between=lambda: None) -> None:
        """Step 1; `between` runs after the cursor is taken and before the exports."""
        self.succeed(self.page.take_cursor)
        between()
        self.succeed(self.page.export_all)

    @property
    def batch(self) -> Path:
        return self.path / "var" / "batch.jsonl"

    @property
    def cursor(self) -> Path:
        return self.path / "var" / "changes.cursor"


@pytest.fixture
def checkout(tmp_path, copy_database) -> Checkout:
    page = page_read()
    path = tmp_path / "checkout"
    (path / "var").mkdir(parents=True)
    (path / "manage.py").symlink_to(PROJECT_DIR / "manage.py")
    if sys.prefix != sys.base_prefix:
        (path / ".venv").symlink_to(sys.prefix)
    else:
        (path / ".venv" / "bin").mkdir(parents=True)
        (path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (path / page.job_file).write_text(page.job, encoding="utf-8")
    # The file the job runs: the statements that load the batch, then the MERGE statements.
    (path / page.apply_file).write_text(page.loading + page.merge, encoding="utf-8")
    env = {**manage_env(), "WAREHOUSE_URL": database_url(copy_database)}
    return Checkout(path=path, page=page, env=env)


def copy_rows(name: str) -> tuple[set[tuple], set[tuple]]:
    """The copy's assignments and links, timestamps in UTC."""
    with psycopg.connect(**{**connection.get_connection_params(), "dbname": name}) as warehouse:
        assignments = warehouse.execute(
            "SELECT experiment_id, subject_id, variant_id, cohort, created_at, source FROM assignments"
        ).fetchall()
        links = warehouse.execute(
            "SELECT subject_type_a, subject_id_a, subject_type_b, subject_id_b, created_at FROM id_links"
        ).fetchall()
    return (
        {(*row[:4], row[4].astimezone(dt.UTC), row[5]) for row in assignments},
        {(*row[:4], row[4].astimezone(dt.UTC)) for row in links},
    )


def source_rows() -> tuple[set[tuple], set[tuple]]:
    """The service's assignments and links, by the IDs the feed and the exports name them with."""
    assignments = Assignment.objects.values_list(
        "experiment__key", "subject_id", "variant__key", "cohort", "created_at", "source"
    )
    links = IdentifierLink.objects.values_list(
        "subject_type_a__key", "subject_id_a", "subject_type_b__key", "subject_id_b", "created_at"
    )
    return (
        {(*row[:4], row[4].astimezone(dt.UTC), row[5]) for row in assignments},
        {(*row[:4], row[4].astimezone(dt.UTC)) for row in links},
    )


def copied_keys(name: str) -> set[tuple[str, str]]:
    return {(experiment_id, subject_id) for experiment_id, subject_id, *_ in copy_rows(name)[0]}


def assert_copy_equal_after_job(checkout: Checkout, name: str) -> None:
    """Run the job; the copy then equals the service's data. Another session of the server may hold the feed's
    horizon back for a moment (a transaction of any database counts): the job then runs again, as cron would."""
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while True:
        result = checkout.job()
        assert result.returncode == 0, result.output
        assert not checkout.batch.exists()
        copy, source = copy_rows(name), source_rows()
        if copy == source or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert copy[0] == source[0], (
        f"missing from the copy: {sorted(source[0] - copy[0])}; not in the service: {sorted(copy[0] - source[0])}"
    )
    assert copy[1] == source[1], (
        f"missing from the copy: {sorted(source[1] - copy[1])}; not in the service: {sorted(copy[1] - source[1])}"
    )


@pytest.fixture
def admin_api() -> ApiClient:
    return ApiClient(api_token_create(name="warehouse-admin", role=Role.ADMIN)[1])


def assign(api: ApiClient, experiment_id: str, *subject_ids: str) -> dict:
    response = api.post("/experiment-assignments", {"experiment_id": experiment_id, "subject_ids": list(subject_ids)})
    assert response.status_code == 200, response.content
    return response.json()["assignments"]


def link(api: ApiClient, a: tuple[str, str], b: tuple[str, str]) -> None:
    identifiers = [{"subject_type": kind, "subject_id": subject_id} for kind, subject_id in (a, b)]
    response = api.post("/id-link", {"identifiers": identifiers})
    assert response.status_code == 200, response.content


def force(experiment_id: str, variant_id: str, *subject_ids: str, replace: bool) -> None:
    result = assignments_force(
        experiment=Experiment.objects.get(key=experiment_id),
        variant_id=variant_id,
        subject_ids=list(subject_ids),
        reason="QA",
        replace=replace,
    )
    assert sorted(result.forced) == sorted(subject_ids)


def end_and_delete(experiment_id: str) -> int:
    Experiment.objects.filter(key=experiment_id).update(status=Experiment.Status.ENDED)
    return assignments_delete(experiment=Experiment.objects.get(key=experiment_id))


def import_file(tmp_path: Path, experiment_id: str, rows: list[tuple[str, str, str]]) -> None:
    path = tmp_path / f"{experiment_id}-import.csv"
    path.write_text(
        "subject_id,variant_id,created_at\n" + "".join(f"{s},{v},{c}\n" for s, v, c in rows), encoding="utf-8"
    )
    out = io.StringIO()
    call_command("import_assignments", str(path), "--experiment", experiment_id, stdout=out)
    assert out.getvalue().strip() == f"imported {len(rows)}, conflicts 0"


def late_insert(subject_id: str) -> psycopg.Connection:
    """A transaction of another session that stores an assignment in checkout-button and stays open: its change
    has a place in the feed before every later one, and can be served only once it has committed."""
    found = Experiment.objects.get(key="checkout-button")
    session = psycopg.connect(**connection.get_connection_params())
    session.execute(
        "INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source)"
        " VALUES (%s, %s, %s, %s, statement_timestamp(), 'hashed')",
        [found.pk, subject_id, found.variants.get(key="green").pk, 1],
    )
    return session


def test_warehouse_copy__page_run_as_written__copy_follows_every_change(tmp_path, checkout, copy_database, admin_api):
    # Given the copy's tables as the page creates them
    subprocess.run(
        ["psql", checkout.env["WAREHOUSE_URL"], "-v", "ON_ERROR_STOP=1", "-q", "-c", checkout.page.tables],
        check=True,
        capture_output=True,
    )
    # ...and a service with experiments on users and cookies, one of them following links, and a holdout
    apply_resources(
        subject_type("user"),
        subject_type("cookie"),
        holdout("h1", share=0.5),
        experiment("checkout-button", holdouts=["h1"]),
        experiment("banner", subject_type="cookie", follow_links=True),
        experiment("short-lived", variants=[variant("a", 0.5, control=True), variant("b", 0.5)]),
        experiment("ended-later"),
    )

    # ...with assignments before the copy starts: through the API (holdout memberships with them), with odd
    # subject IDs, links, a QA override, and a row from before the change feed existed
    assign(admin_api, "checkout-button", "u-1", "u-2", *ODD_SUBJECTS)
    assign(admin_api, "banner", "c-1")
    link(admin_api, ("cookie", "c-1"), ("cookie", "c-2"))
    link(admin_api, ("cookie", "c-1"), ("user", "u-1"))
    assign(admin_api, "short-lived", "s-1", "s-2")
    assign(admin_api, "ended-later", "e-1")
    force("checkout-button", "green", "qa-1", replace=False)
    assert Assignment.objects.filter(experiment__key="h1").exists()
    ended_later = Experiment.objects.get(key="ended-later")
    before_the_feed = Assignment.objects.create(
        experiment=ended_later,
        subject_id="legacy-1",
        variant=ended_later.variants.get(key="control"),
        cohort=1,
        created_at=timezone.now() - dt.timedelta(days=400),
    )
    Assignment.objects.filter(pk=before_the_feed.pk).update(change_xid=None, recorded_at=None)

    # When step 1 runs, with changes between its cursor and its exports: a new subject, a linked one, a
    # replacement, and a deletion of assignments made before the cursor
    def meanwhile():
        assign(admin_api, "checkout-button", "u-3")
        assert assign(admin_api, "banner", "c-2")["c-2"] == assign(admin_api, "banner", "c-1")["c-1"]
        force("checkout-button", "control", "qa-1", replace=True)
        assert end_and_delete("short-lived") == 2

    checkout.full_copy(between=meanwhile)
    assert checkout.batch.stat().st_size > 0

    # Then the job's first run applies the full copy and the changes after the cursor
    assert_copy_equal_after_job(checkout, copy_database)
    assert ("banner", "c-2") in copied_keys(copy_database)
    assert ("ended-later", "legacy-1") in copied_keys(copy_database)

    # When subjects are imported and linked, then the next run copies them
    import_file(
        tmp_path,
        "checkout-button",
        [("imp-1", "green", "2026-01-02T03:04:05.123456Z"), ("imp-2", "control", "2025-12-31")],
    )
    link(admin_api, ("user", "u-2"), ("cookie", "c-9"))
    assert_copy_equal_after_job(checkout, copy_database)

    # When a subject is forced and then forced again in one batch, and another is forced again, then the copy
    # holds the last of each
    force("checkout-button", "green", "qa-2", replace=False)
    force("checkout-button", "control", "qa-2", replace=True)
    force("checkout-button", "green", "qa-1", replace=True)
    assert_copy_equal_after_job(checkout, copy_database)

    # When an experiment copied earlier is deleted, with subjects assigned and deleted within the same batch
    assign(admin_api, "ended-later", "e-2", "e-3")
    end_and_delete("ended-later")
    # Then the copy has none of its assignments
    assert_copy_equal_after_job(checkout, copy_database)
    assert not any(key[0] == "ended-later" for key in copied_keys(copy_database))

    # When a transaction that stored an assignment is still open while later ones commit and the job runs
    late = late_insert("late-1")
    try:
        assign(admin_api, "checkout-button", "after-late-1")
        result = checkout.job()
        assert result.returncode == 0, result.output
        # Then neither it nor any later change is copied yet
        assert not {("checkout-button", "late-1"), ("checkout-button", "after-late-1")} & copied_keys(copy_database)
        late.commit()
    finally:
        late.close()
    # ...and once it has committed, the next run copies both
    assert_copy_equal_after_job(checkout, copy_database)
    assert ("checkout-button", "late-1") in copied_keys(copy_database)

    # When a run cannot reach the warehouse after its export, then it fails and leaves its batch
    assign(admin_api, "checkout-button", "u-4")
    cursor = checkout.cursor.read_text()
    failed = checkout.job(extra_env={"WAREHOUSE_URL": database_url(f"{copy_database}_missing")})
    assert failed.returncode != 0
    assert checkout.batch.stat().st_size > 0
    assert checkout.cursor.read_text() != cursor
    # ...and the next run applies that batch, then the changes made since
    assign(admin_api, "checkout-button", "u-5")
    assert_copy_equal_after_job(checkout, copy_database)

    # When changes after the job's cursor were dropped as older than the retention, then the job exits with
    # code 2 and applies nothing
    expired = {"CHANGES_RETENTION_DAYS": "0"}
    assign(admin_api, "checkout-button", "u-6")
    checkout.prune(extra_env=expired)
    refused = checkout.job(extra_env=expired)
    assert refused.returncode == 2, refused.output
    assert "older than the changes kept (CHANGES_RETENTION_DAYS) and were dropped" in refused.output
    assert ("checkout-button", "u-6") not in copied_keys(copy_database)

    # The rounds above made every kind of change, from every source
    assert set(Assignment.objects.values_list("source", flat=True)) == {"hashed", "linked", "forced", "imported"}
