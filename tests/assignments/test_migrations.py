"""assignments/migrations/: the migrations against a database that holds rows: what existing resources become.

Each test migrates a database of its own with `manage.py migrate` in another process, as an operator
would upgrade, so the test session's database (migrated to the latest state) is never moved back.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.helpers.processes import manage_output, manage_run
from tests.helpers.resources import experiment, subject_type, yaml_documents
from tests.helpers.server import database_url_for_tests

# Rows as the builds before the gates (migration 0006) stored the subject type `user` and the active
# experiment `checkout` on it, 50/50: what apply_resources of PLAIN_DOCUMENTS made then.
ROWS_AT_0006 = [
    "INSERT INTO assignments_subjecttype (key, name, description, resource_version, created_at, updated_at, status) "
    "VALUES ('user', 'user', '', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 'active')",
    "INSERT INTO assignments_experiment (key, name, description, resource_version, created_at, updated_at, lab_id, "
    "subject_type_id, status, hypothesis, salt, winning_variant_id, follow_links) "
    "SELECT 'checkout', 'checkout', '', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, lab.id, subjecttype.id, 'active', "
    "'', 'checkout', NULL, FALSE FROM assignments_lab lab, assignments_subjecttype subjecttype "
    "WHERE lab.key = 'default' AND subjecttype.key = 'user'",
    "INSERT INTO assignments_variant (experiment_id, key, name, description, position, is_control, split) "
    "SELECT id, 'control', '', '', 0, TRUE, 0.5 FROM assignments_experiment",
    "INSERT INTO assignments_variant (experiment_id, key, name, description, position, is_control, split) "
    "SELECT id, 'green', '', '', 1, FALSE, 0.5 FROM assignments_experiment",
    "INSERT INTO assignments_cohort (experiment_id, number, splits, created_at) "
    """SELECT id, 1, '[{"variant": "control", "split": 0.5}, {"variant": "green", "split": 0.5}]', """
    "CURRENT_TIMESTAMP FROM assignments_experiment",
]
READ_GATES = (
    "SELECT e.coverage, e.targeting, e.enrollment_start_at, e.enrollment_stop_at, c.population, s.attributes "
    "FROM assignments_experiment e JOIN assignments_cohort c ON c.experiment_id = e.id "
    "JOIN assignments_subjecttype s ON s.id = e.subject_type_id"
)
PLAIN_DOCUMENTS = (subject_type("user"), experiment("checkout"))


Connect = Callable[[], contextlib.AbstractContextManager]


@contextlib.contextmanager
def sqlite_database(tmp_path: Path) -> Iterator[tuple[str, Connect]]:
    """A new SQLite database: its DATABASE_URL, and how to connect to it (autocommit)."""
    path = tmp_path / "upgraded.sqlite3"
    yield f"sqlite:///{path}", lambda: contextlib.closing(sqlite3.connect(path, isolation_level=None))


@contextlib.contextmanager
def postgres_database(tmp_path: Path) -> Iterator[tuple[str, Connect]]:
    """A new database on the test session's PostgreSQL server, dropped at the end."""
    server = database_url_for_tests().rsplit("/", 1)[0]
    name = f"upgraded_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield f"{server}/{name}", lambda: psycopg.connect(f"{server}/{name}", autocommit=True)
        finally:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.parametrize(
    "database",
    [sqlite_database, pytest.param(postgres_database, marks=pytest.mark.postgres)],
    ids=["sqlite", "postgres"],
)
def test_migrate_0007__experiments_and_cohorts_stored_before__everyone_enters_and_nothing_changes(tmp_path, database):
    with database(tmp_path) as (url, connect):
        env = {"DATABASE_URL": url, "SECRET_KEY": "migration-tests"}
        # Given a database of the builds before the gates, holding a subject type, an experiment and its cohort
        manage_output("migrate", "assignments", "0006", env=env)
        with connect() as before:
            for statement in ROWS_AT_0006:
                before.execute(statement)

        # When it is migrated
        manage_output("migrate", env=env)

        # Then the experiment lets everyone in (coverage 1, no targeting, no window), its cohort records no
        # rule, the subject type declares no attribute
        with connect() as after:
            (row,) = after.execute(READ_GATES).fetchall()
        coverage, targeting, start_at, stop_at, population, attributes = [
            json.loads(value) if isinstance(value, str) else value for value in row
        ]
        assert (coverage, targeting, start_at, stop_at, population, attributes) == (1, None, None, None, {}, [])
        # And the documents that made those rows are no change to them
        documents = tmp_path / "plain.yaml"
        documents.write_text(yaml_documents(*PLAIN_DOCUMENTS), encoding="utf-8")
        assert manage_output("apply_resources", str(documents), env=env).splitlines() == [
            "subjecttype user: unchanged",
            "experiment checkout: unchanged",
        ]


ROW_AT_0010 = (
    "INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source) "
    "SELECT v.experiment_id, '{subject}', v.id, 1, CURRENT_TIMESTAMP, 'hashed' FROM assignments_variant v "
    "WHERE v.key = 'control'"
)
READ_CHANGE_COLUMNS = "SELECT subject_id, change_xid, recorded_at FROM assignments_assignment ORDER BY subject_id"
READ_COUNTS = "SELECT sum(assignments) FROM assignments_assignmentcount"


@pytest.mark.parametrize(
    "database",
    [sqlite_database, pytest.param(postgres_database, marks=pytest.mark.postgres)],
    ids=["sqlite", "postgres"],
)
def test_migrate_0011__rows_stored_before_stay_out_of_the_change_feed_new_ones_are_stamped(tmp_path, database):
    with database(tmp_path) as (url, connect):
        env = {"DATABASE_URL": url, "SECRET_KEY": "migration-tests"}
        # Given a database of the builds before the change feed, holding an assignment
        manage_output("migrate", "assignments", "0010", env=env)
        with connect() as before:
            for statement in [*ROWS_AT_0006, ROW_AT_0010.format(subject="before")]:
                before.execute(statement)

        # When it is migrated, and an assignment is stored after
        manage_output("migrate", env=env)
        with connect() as after:
            after.execute(ROW_AT_0010.format(subject="after"))
            rows = after.execute(READ_CHANGE_COLUMNS).fetchall()
            counted = after.execute(READ_COUNTS).fetchone()[0]

        # Then the row stored before has no place in the feed, the new one has, and the counts saw each once
        (_, after_xid, after_recorded), (_, before_xid, before_recorded) = rows
        assert (before_xid, before_recorded) == (None, None)
        assert after_xid is not None and after_recorded is not None
        assert counted == 2
        # And the migration can be undone and done again
        manage_output("migrate", "assignments", "0010", env=env)
        manage_output("migrate", env=env)


def flush_deleting_counts_first(env: dict[str, str]) -> dict[str, str]:
    """The environment of a `manage.py flush` that deletes the assignment counts before the assignments. Its
    order of tables comes from a set, so from the hash seed: the first seed that gives that order."""
    for seed in range(32):
        seeded = {**env, "PYTHONHASHSEED": str(seed)}
        tables = [line.split('"')[1] for line in manage_output("sqlflush", env=seeded).splitlines() if '"' in line]
        if tables.index("assignments_assignmentcount") < tables.index("assignments_assignment"):
            return seeded
    raise AssertionError("no hash seed below 32 has the flush delete the counts first")


def test_migrate_0013__sqlite_flush_deleting_the_counts_first__succeeds_and_empties_the_tables(tmp_path):
    with sqlite_database(tmp_path) as (url, connect):
        env = {"DATABASE_URL": url, "SECRET_KEY": "migration-tests"}
        # Given a database of the builds before 0013 holding assignments, and a flush that deletes their counts
        # before them
        manage_output("migrate", "assignments", "0012", env=env)
        documents = tmp_path / "plain.yaml"
        documents.write_text(yaml_documents(*PLAIN_DOCUMENTS), encoding="utf-8")
        manage_output("apply_resources", str(documents), env=env)
        with connect() as before:
            for subject in ("a", "b"):
                before.execute(ROW_AT_0010.format(subject=subject))
        flushing = flush_deleting_counts_first(env)
        kept = (tmp_path / "upgraded.sqlite3").read_bytes()

        # Then before the migration that flush fails: each deleted assignment wrote its count of -1 again
        assert manage_run("flush", "--no-input", env=flushing).returncode != 0

        # When it is migrated, the same rows back
        (tmp_path / "upgraded.sqlite3").write_bytes(kept)
        manage_output("migrate", env=env)

        # Then the flush succeeds and leaves no assignment and no count
        manage_output("flush", "--no-input", env=flushing)
        with connect() as after:
            assert after.execute("SELECT count(*) FROM assignments_assignment").fetchone()[0] == 0
            assert after.execute("SELECT count(*) FROM assignments_assignmentcount").fetchone()[0] == 0
        # And the migration can be undone and done again
        manage_output("migrate", "assignments", "0012", env=env)
        manage_output("migrate", env=env)
