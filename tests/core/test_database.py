"""The hot path's connections: a kept one that broke is replaced without a round trip per request,
and statements are prepared only where a kept plan cannot go wrong (core/database.py)."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import OperationalError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from assignments.assigning import assign_subject, assign_subjects
from assignments.models import Experiment, Variant
from assignments.selectors import subject_types_active_steps
from core.database import PREPARE_MIN_TABLE_BYTES, with_live_connection
from idlinks.services import Identifier, id_link_create
from tests.helpers.database import database_unreachable
from tests.helpers.processes import manage_env, manage_run

pytestmark = pytest.mark.postgres


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def terminate(pid: int) -> None:
    """End a backend from another session, as a database restart or a dropped link would."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
def test_with_live_connection__kept_connection_broke__retried_once_on_a_new_one():
    # Given: a connection kept from an earlier request, whose backend has since gone away
    old_pid = backend_pid()
    terminate(old_pid)
    calls = []

    def work() -> int:
        calls.append(1)
        return backend_pid()

    # When
    new_pid = with_live_connection(work)

    # Then: the first attempt failed on the dead connection, the retry ran on a new one
    assert len(calls) == 2
    assert new_pid != old_pid


@pytest.mark.django_db(transaction=True)
def test_with_live_connection__broken_connection_without_it__the_request_fails():
    # The failure with_live_connection absorbs: without it, the first statement on the dead connection raises.
    terminate(backend_pid())

    with pytest.raises(OperationalError):
        backend_pid()
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_with_live_connection__database_down_on_a_new_connection__not_retried():
    connection.close()
    calls = []

    def work() -> int:
        calls.append(1)
        return backend_pid()

    with database_unreachable(), pytest.raises(OperationalError):
        with_live_connection(work)

    assert calls == [1]


@pytest.mark.django_db(transaction=True)
def test_api_request__kept_connection_broke__answered_200_not_503(demo_config, proxy_token):
    # Given: a warm process whose kept connection has died (the token and the experiment are cached)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {proxy_token}")
    body = {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}
    first = client.post("/experiment-assignments", body, content_type="application/json")
    terminate(backend_pid())

    # When
    again = client.post("/experiment-assignments", body, content_type="application/json")

    # Then
    assert again.status_code == 200, again.content
    assert again.json() == first.json()


def prepared_statements() -> list[tuple[str, str, int, int]]:
    """This session's prepared statements: (name, statement, generic plans, custom plans)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements")
        return cursor.fetchall()


def grow_assignments(experiment: Experiment, *, rows: int) -> None:
    """Add `rows` assignments in one statement, leaving the statistics as they were (no ANALYZE)."""
    variant = Variant.objects.filter(experiment=experiment).first()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at) "
            "SELECT %s, 'grown-' || n, %s, 1, now() FROM generate_series(1, %s) AS n",
            [experiment.pk, variant.pk, rows],
        )
        cursor.execute("SELECT pg_relation_size('assignments_assignment')")
        assert cursor.fetchone()[0] >= PREPARE_MIN_TABLE_BYTES


def fetch_plan(name: str, experiment: Experiment) -> str:
    """The plan this session would run the prepared fetch with (its kept generic plan, once it has one)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN EXECUTE {name}(%s, %s)", [experiment.pk, json.dumps({experiment.pk: ["grown-7"]})])
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.fixture
def unanalysed_assignments(transactional_db):
    """A new connection (no statement prepared yet) and an assignments table without autovacuum,
    so only these tests decide when it is analysed; both put back afterwards."""
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE assignments_assignment SET (autovacuum_enabled = false)")
    yield
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE assignments_assignment RESET (autovacuum_enabled)")


@pytest.fixture
def large_table(unanalysed_assignments, demo_config) -> Experiment:
    """checkout-button, its assignments table grown past the threshold, and a new connection that has not run
    the hot path yet."""
    experiment = Experiment.objects.get(key="checkout-button")
    grow_assignments(experiment, rows=250_000)
    connection.close()
    return experiment


@pytest.mark.single_node("prepared plans on one server; Citus plans distributed statements itself")
def test_statements__table_grows_from_empty__never_prepared_on_that_connection(unanalysed_assignments, demo_config):
    # Given: a connection that first ran the hot path while the table was empty
    experiment = Experiment.objects.get(key="checkout-button")
    for number in range(10):
        assign_subjects(experiment_id="checkout-button", subject_ids=[f"early-{number}"])

    # When: the table grows past the size where preparing is safe, and the hot path runs on
    grow_assignments(experiment, rows=250_000)
    for number in range(10):
        assign_subjects(experiment_id="checkout-button", subject_ids=[f"late-{number}"])

    # Then: nothing was prepared, so no plan made on the empty table is kept
    assert prepared_statements() == []


@pytest.mark.single_node("prepared plans on one server; Citus plans distributed statements itself")
def test_statements__table_large_when_connection_first_ran_them__prepared_with_an_index_plan(large_table):
    # Given: a table past the threshold, and a new connection that has not run the hot path yet
    experiment = large_table

    # When: enough requests for PostgreSQL to settle on a generic plan
    for number in range(10):
        assert assign_subjects(experiment_id="checkout-button", subject_ids=[f"new-{number}", "grown-7"])

    # Then: the fetch and the insert are prepared, and the kept plan probes the unique index
    prepared = {statement.strip(): (name, generic) for name, statement, generic, _ in prepared_statements()}
    fetch = next(
        key
        for key in prepared
        if key.startswith("SELECT NULL::bigint, NULL::text, NULL::bigint, NULL::integer, NULL::text, e.resource")
    )
    assert any(key.startswith("INSERT INTO assignments_assignment") for key in prepared)
    name, generic_plans = prepared[fetch]
    assert generic_plans > 0
    plan = fetch_plan(name, experiment)
    assert "assignment_experiment_subject_unique" in plan, plan
    assert "Seq Scan on assignments_assignment" not in plan


@pytest.mark.single_node("prepared plans on one server; Citus plans distributed statements itself")
def test_statements__subject_assignments_on_a_large_table__prepared_fetch_probes_the_index(large_table):
    # Given: a table past the threshold and a new connection
    experiment = large_table

    # When: POST /assignments' reads are run until PostgreSQL keeps a generic plan
    for number in range(10):
        assign_subject(subject={"user": f"grown-{number}"}, experiment_ids=None, assign=False)

    # Then: its fetch (the catalog's version, then the pairs) probes the unique index
    prepared = {statement.strip(): (name, generic) for name, statement, generic, _ in prepared_statements()}
    fetch = next(key for key in prepared if key.startswith("SELECT NULL::bigint") and "assignments_layer" in key)
    name, generic_plans = prepared[fetch]
    assert generic_plans > 0
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN EXECUTE {name}(%s)", [json.dumps({experiment.pk: ["grown-7"]})])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "assignment_experiment_subject_unique" in plan, plan
    assert "Seq Scan on assignments_assignment" not in plan


def test_statements__link_insert_on_an_empty_table__prepared(unanalysed_assignments, demo_config):
    # Given: a new connection, and no link stored (an INSERT of VALUES has one plan whatever the size)
    user, cookie = (
        Identifier(subject_type="user", subject_id="u-1"),
        Identifier(subject_type="cookie", subject_id="c-1"),
    )

    # When
    id_link_create(first=user, second=cookie, subject_types_active=subject_types_active_steps)

    # Then
    assert any(
        statement.strip().startswith("INSERT INTO idlinks_identifierlink") for _, statement, *_ in prepared_statements()
    )


@pytest.mark.single_node("prepared plans on one server; Citus plans distributed statements itself")
def test_statements__queries_logged_on_a_large_table__log_shows_the_sql(large_table):
    # Given: a table past the threshold and a new connection (large_table)

    # When: the queries are logged, as with DEBUG on
    with CaptureQueriesContext(connection) as captured:
        assign_subjects(experiment_id="checkout-button", subject_ids=["new-1"])

    # Then: every statement logged with its SQL, the hot path's insert among them
    logged = [query["sql"] for query in captured.captured_queries]
    assert all(isinstance(sql, str) for sql in logged), logged
    assert any(sql.lstrip().startswith("INSERT INTO assignments_assignment") for sql in logged), logged


@pytest.mark.single_node("prepared plans on one server; Citus plans distributed statements itself")
def test_statements__prepared_statements_off__never_prepared(large_table, settings):
    # Given: DATABASE_PREPARED_STATEMENTS=false (a pooler that cannot keep them), and a large table (large_table)
    settings.DATABASE_PREPARED_STATEMENTS = False

    # When
    for number in range(10):
        assign_subjects(experiment_id="checkout-button", subject_ids=[f"new-{number}"])

    # Then
    assert prepared_statements() == []


TIMEOUTS_SHOWN = (
    "from django.db import connection; cursor = connection.cursor(); "
    "cursor.execute(\"SELECT current_setting('statement_timeout'), current_setting('lock_timeout')\"); "
    "print(*cursor.fetchone())"
)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("env", "shown"),
    [
        ({"DATABASE_REQUEST_TIMEOUTS": "true"}, "1500ms 700ms"),
        # A pooler such as PgBouncer refuses startup options: with the timeouts on the role, none are sent.
        (
            {
                "DATABASE_REQUEST_TIMEOUTS": "true",
                "DATABASE_STATEMENT_TIMEOUT_MS": "0",
                "DATABASE_LOCK_TIMEOUT_MS": "0",
            },
            "0 0",
        ),
        # A management command, a migration: no timeouts.
        ({}, "0 0"),
    ],
    ids=["web-server", "web-server-both-zero", "command"],
)
def test_request_timeouts__on_only_where_asked__connections_carry_them(db, env, shown):
    # Given a process started as gunicorn starts the service (deploy/gunicorn.conf.py sets DATABASE_REQUEST_TIMEOUTS)
    # or as a command is
    result = manage_run(
        "shell",
        "--no-imports",
        "-c",
        TIMEOUTS_SHOWN,
        env={
            **manage_env(),
            "DATABASE_STATEMENT_TIMEOUT_MS": "1500",
            "DATABASE_LOCK_TIMEOUT_MS": "700",
            **env,
        },
    )

    # Then its connections carry the timeouts, or none
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == shown


def test_test_process__connections_carry_no_web_server_timeouts(db):
    # Whatever the suite imported (config.wsgi, for its requests): with the server's timeouts a slow flush of
    # the test database fails and leaves its rows to the next test.
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')")
        assert cursor.fetchone() == ("0", "0")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgres://root@127.0.0.1:5432/no_such_database_here", 'database "no_such_database_here" does not exist'),
        ("postgres://root@127.0.0.1:9/service", "Connection refused"),
    ],
    ids=["missing-database", "unreachable-server"],
)
def test_migrate__database_it_cannot_use__one_line_naming_it_and_exit_1(url, said):
    # Given a DATABASE_URL whose database does not exist, or whose server does not answer
    # When migrate runs against it, as a first deployment does
    result = manage_run("migrate", env={"DATABASE_URL": url, "SECRET_KEY": "command-tests"})

    # Then it says so in one line that names the database and the driver's reason, and fails
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: cannot use the database ")
    assert url.rsplit("/", 1)[1] in result.stderr and said in result.stderr
    assert "Traceback" not in result.stderr


def test_migrate__traceback_asked__the_whole_traceback():
    result = manage_run(
        "migrate",
        "--traceback",
        env={"DATABASE_URL": "postgres://root@127.0.0.1:5432/no_such_database_here", "SECRET_KEY": "command-tests"},
    )

    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
