"""The distributed layout on Citus (docs/how-to/scale-out-citus.md): distribute_tables, the hot path's plans,
a worker's outage.

scripts/test-citus runs these on a coordinator with two workers, where the
suite's own setup has run distribute_tables; on PostgreSQL and SQLite only the
refusal runs.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assignments.distribution import DISTRIBUTED_TABLES, REFERENCE_TABLES, assignments_distributed
from assignments.exports import assignment_rows
from assignments.models import Assignment, AssignmentCount, Experiment
from assignments.storage import (
    CITUS_SHARDS,
    FETCH,
    assignments_insert,
    citus_fetch_rows,
    citus_insert,
    citus_shard_rows,
)
from devtools.citus import citus_database_create
from tests.helpers import resources
from tests.helpers.database import assignments_shard_count
from tests.helpers.processes import manage_output, manage_run
from tests.helpers.server import wait_until

on_citus = os.environ.get("TEST_CITUS") == "1"
citus = pytest.mark.skipif(not on_citus, reason="needs the tables distributed on Citus (scripts/test-citus)")


@pytest.mark.skipif(on_citus, reason="this database is Citus")
@pytest.mark.django_db
def test_distribute_tables__not_citus__refuses_and_changes_nothing():
    with pytest.raises(CommandError, match=r"nothing changed: .* has no citus extension"):
        call_command("distribute_tables")


@citus
@pytest.mark.django_db
def test_distribute_tables__run_again__layout_in_place_nothing_to_do():
    assert assignments_distributed()
    out = io.StringIO()
    call_command("distribute_tables", stdout=out)

    assert out.getvalue() == "the layout was already distributed; nothing to do\n"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT logicalrelid::regclass::text, partmethod, colocationid, "
            "column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition"
        )
        layout = {table: (method, colocation, column) for table, method, colocation, column in cursor.fetchall()}
    assert all(layout[table][0] == "n" for table in REFERENCE_TABLES)
    assert {item.table: layout[item.table][2] for item in DISTRIBUTED_TABLES} == {
        item.table: item.column for item in DISTRIBUTED_TABLES
    }
    assert len({layout[item.table][1] for item in DISTRIBUTED_TABLES}) == 1, "co-located"


def _plan(sql: str, params: list | None) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        return cursor.fetchone()[0][0]["Plan"]


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)
    for task in plan.get("Distributed Query", {}).get("Job", {}).get("Tasks", ()):
        for remote in task["Remote Plan"]:
            yield from _nodes(remote[0]["Plan"])
    for subplan in plan.get("Distributed Query", {}).get("Subplans", ()):
        yield from _nodes(subplan["PlannedStmt"][0]["Plan"])


@citus
@pytest.mark.parametrize(
    ("statement", "params"),
    [(FETCH[("citus-subject", True)], [1, [1], "u-1"]), (FETCH[("citus", True)], [1, [1], ["u-1"]])],
    ids=["one subject ID", "a list of one"],
)
@pytest.mark.django_db
def test_fetch__one_subject__routed_to_one_shard(demo_config, statement, params):
    plan = _plan(statement, params)

    jobs = [node["Distributed Query"]["Job"] for node in _nodes(plan) if "Distributed Query" in node]
    assert [job["Task Count"] for job in jobs] == [1]


@citus
@pytest.mark.django_db
def test_fetch__1000_subjects__one_task_per_shard_each_through_the_unique_index(demo_config):
    subjects = [f"u-{n}" for n in range(1000)]
    # The test's shards hold a few rows, which a scan reads as fast: plans as for a big table. On such
    # shards, whose statistics come from whatever earlier tests committed, reading an experiment's rows
    # by time and filtering them can also look as cheap as probing: that index is out of the question
    # here, until the test's transaction ends.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL citus.propagate_set_commands TO 'local'")
        cursor.execute("SET LOCAL enable_seqscan TO off")
        cursor.execute("DROP INDEX assignment_experiment_created")

    plan = _plan(FETCH[("citus", True)], [1, [1], subjects])

    tasks = [node["Distributed Query"]["Job"]["Task Count"] for node in _nodes(plan) if "Distributed Query" in node]
    assert max(tasks) == assignments_shard_count()
    scans = [node for node in _nodes(plan) if "Relation Name" in node and "assignment_" in node["Relation Name"]]
    assert scans, "a shard scan is shown"
    assert all(node.get("Index Name", "").startswith("assignment_experiment_subject_unique") for node in scans), (
        json.dumps(scans)[:500]
    )


def _new_rows(prefix: str, count: int) -> tuple[list[tuple], object]:
    """`count` new (experiment pk, subject ID, variant pk, cohort, source) rows of checkout-button, and a time
    for them as the service adapts it."""
    experiment = Experiment.objects.get(key="checkout-button")
    variant = experiment.variants.first()
    rows = [(experiment.pk, f"{prefix}-{n:04d}", variant.pk, 1, "hashed") for n in range(count)]
    return rows, connection.ops.adapt_datetimefield_value(timezone.now())


def _execute(cursor, asked: list[str]):
    """The `execute(sql, params) -> rows` storage.py's Citus helpers take, noting each statement in `asked`."""

    def execute(sql, params):
        asked.append(sql)
        cursor.execute(sql, params)
        return cursor.fetchall()

    return execute


@citus
@pytest.mark.django_db
def test_fetch_rows__one_subject_id__one_statement_comparing_it_with_equals(demo_config):
    rows, created = _new_rows("one", 2)
    experiment_pk = rows[0][0]
    asked = []

    with connection.cursor() as cursor:
        execute = _execute(cursor, asked)
        execute(citus_insert(rows[:1], created, context=connection.connection), None)
        asked.clear()
        stored, shards = citus_fetch_rows(
            execute, head=[experiment_pk], experiments=[experiment_pk], subject_ids=["one-0000"]
        )
        missing, _ = citus_fetch_rows(
            execute, head=[experiment_pk], experiments=[experiment_pk], subject_ids=["one-0001"]
        )

    assert asked == [FETCH[("citus-subject", True)]] * 2
    version = Experiment.objects.get(pk=experiment_pk).resource_version
    assert stored == [(None, None, None, version), (experiment_pk, "one-0000", rows[0][2], None)]
    assert shards is None
    assert missing == [(None, None, None, version)]


@citus
@pytest.mark.django_db
def test_shard_rows__1000_subjects__one_group_per_shard_in_shard_order_its_insert_routed_there(demo_config):
    rows, created = _new_rows("n", 1000)

    with connection.cursor() as cursor:
        groups = citus_shard_rows(_execute(cursor, []), rows)
        cursor.execute(
            "SELECT x, get_shard_id_for_distribution_column('assignments_assignment', x) FROM unnest(%s::text[]) AS x",
            [[row[1] for row in rows]],
        )
        shard_of = dict(cursor.fetchall())

    assert len(groups) == assignments_shard_count()
    shards = [{shard_of[row[1]] for row in group} for group in groups]
    assert all(len(group_shards) == 1 for group_shards in shards)
    assert [group_shards.pop() for group_shards in shards] == sorted(shard_of[group[0][1]] for group in groups)
    assert sorted(row for group in groups for row in group) == rows
    for group in groups:
        plan = _plan(citus_insert(group, created, context=connection.connection), None)
        assert plan["Custom Plan Provider"] == "Citus Adaptive"
        assert "INSERT/SELECT method" not in json.dumps(plan)
        assert plan["Distributed Query"]["Job"]["Task Count"] == 1


@citus
@pytest.mark.django_db
def test_shard_rows__shards_known_from_the_batchs_read__the_same_groups_without_asking(demo_config):
    rows, _ = _new_rows("k", 1000)
    asked = []

    with connection.cursor() as cursor:
        execute = _execute(cursor, asked)
        _, shards = citus_fetch_rows(execute, head=[], experiments=[rows[0][0]], subject_ids=[r[1] for r in rows])
        asked.clear()
        known = citus_shard_rows(execute, rows, shards=shards)
        assert asked == []
        partly_known = citus_shard_rows(execute, rows, shards={rows[0][1]: shards[rows[0][1]]})

    assert asked == [CITUS_SHARDS]
    assert known == partly_known
    assert len(known) == assignments_shard_count()


@pytest.mark.postgres
@pytest.mark.django_db
def test_citus_insert__quotes_and_backslashes_and_percent_signs__stored_as_sent(demo_config):
    # The Citus insert writes its values into the statement (psycopg's quoting); it is plain SQL, run here on
    # whichever PostgreSQL the suite has.
    experiment = Experiment.objects.get(key="checkout-button")
    variant = experiment.variants.first()
    subject_ids = ["o'brien", "back\\slash", "%s", "%(x)s", "'); DELETE FROM assignments_assignment; --", "ü-ß"]
    rows = [(experiment.pk, subject_id, variant.pk, 1, "hashed") for subject_id in sorted(subject_ids)]
    created = connection.ops.adapt_datetimefield_value(timezone.now())

    with connection.cursor() as cursor:
        cursor.execute(citus_insert(rows, created, context=connection.connection))
        returned = cursor.fetchall()

    assert sorted(subject_id for _, subject_id, _ in returned) == sorted(subject_ids)
    stored = Assignment.objects.filter(experiment=experiment, subject_id__in=subject_ids)
    assert sorted(stored.values_list("subject_id", "variant_id", "cohort", "source")) == sorted(
        (subject_id, variant.pk, 1, "hashed") for subject_id in subject_ids
    )
    assert {assignment.created_at for assignment in stored} == {created}


@citus
@pytest.mark.django_db(transaction=True)
def test_insert__1000_subjects_a_third_stored_unseen__each_shards_copy_refused_then_inserted_once(demo_config):
    experiment = Experiment.objects.get(key="checkout-button")
    variants = list(experiment.variants.values_list("pk", flat=True))
    rows = [(experiment.pk, f"m-{n:04d}", variants[n % len(variants)], 1, "hashed") for n in range(1000)]
    stored_before = {row[1]: row[2] for row in rows[::3]}
    assignments_insert(rows=[row for row in rows if row[1] in stored_before], created_at=timezone.now())

    with CaptureQueriesContext(connection) as queries:
        inserted = assignments_insert(rows=rows, created_at=timezone.now())

    assert inserted == {
        (pk, subject_id): variant for pk, subject_id, variant, *_ in rows if subject_id not in stored_before
    }
    assert dict(Assignment.objects.filter(experiment=experiment).values_list("subject_id", "variant_id")) == {
        row[1]: row[2] for row in rows
    }
    statements = [query["sql"].split()[0] for query in queries.captured_queries]
    assert statements == ["SELECT", *["COPY", "INSERT"] * assignments_shard_count()]
    assert _counted(experiment.pk) == len(rows)


@citus
@pytest.mark.django_db(transaction=True)
def test_insert__1000_new_subjects__copied_shard_by_shard_every_row_returned_and_counted(demo_config):
    experiment = Experiment.objects.get(key="checkout-button")
    variant = experiment.variants.first()
    odd = [
        "o'brien",
        "back\\slash",
        "tab\there",
        "new\nline",
        "%s",
        "'); DELETE FROM assignments_assignment; --",
        "ü-ß",
    ]
    subject_ids = sorted([*odd, *(f"c-{n:04d}" for n in range(1000 - len(odd)))])
    rows = [(experiment.pk, subject_id, variant.pk, 1, "hashed") for subject_id in subject_ids]
    created = timezone.now()

    with CaptureQueriesContext(connection) as queries:
        inserted = assignments_insert(rows=rows, created_at=created)

    assert inserted == {(experiment.pk, subject_id): variant.pk for subject_id in subject_ids}
    statements = [query["sql"].split()[0] for query in queries.captured_queries]
    assert statements == ["SELECT", *["COPY"] * assignments_shard_count()]
    stored = Assignment.objects.filter(experiment=experiment)
    assert sorted(stored.values_list("subject_id", flat=True)) == subject_ids
    assert set(stored.values_list("variant_id", "cohort", "source", "created_at")) == {
        (variant.pk, 1, "hashed", created)
    }
    assert _counted(experiment.pk) == len(rows)


@citus
@pytest.mark.django_db
def test_insert__in_a_transaction_a_shards_copy_refused__rolled_back_to_its_savepoint_then_inserted(demo_config):
    rows, created = _new_rows("t", 200)
    assignments_insert(rows=rows[::2], created_at=created)

    with transaction.atomic():
        inserted = assignments_insert(rows=rows, created_at=created)
        assert Assignment.objects.filter(subject_id__startswith="t-").count() == len(rows)

    assert inserted == {(pk, subject_id): variant for pk, subject_id, variant, *_ in rows[1::2]}


def _counted(experiment_pk: int) -> int:
    return AssignmentCount.objects.filter(experiment_id=experiment_pk).aggregate(total=Sum("assignments"))["total"]


@citus
@pytest.mark.django_db(transaction=True)
def test_count_trigger__one_connection_on_every_shard__each_counted_in_its_own_shards_counts(demo_config):
    # Each worker connection keeps the name of a shard's counts once it has looked it up (distribution.py):
    # one subject at a time through one connection, ten a shard on average and so mostly with the name kept,
    # must count each subject in the counts co-located with its own shard, never in another one looked up.
    rows, _ = _new_rows("c", 320)

    for row in rows:
        assignments_insert(rows=[row], created_at=timezone.now())

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT counts.shardid, 'assignments_assignment_' || own.shardid FROM pg_dist_shard own "
            "JOIN pg_dist_shard counts ON counts.shardminvalue = own.shardminvalue "
            "WHERE own.logicalrelid = 'assignments_assignment'::regclass "
            "AND counts.logicalrelid = 'assignments_assignmentcount'::regclass"
        )
        own_shard = dict(cursor.fetchall())
        cursor.execute(
            "SELECT shardid, result FROM run_command_on_shards('assignments_assignmentcount', "
            "$$SELECT string_agg(DISTINCT split_part(shard, '-', 1), ',') FROM %s$$)"
        )
        writers = {shard: set(result.split(",")) for shard, result in cursor.fetchall() if result}
    assert len(writers) == assignments_shard_count(), "every shard was written"
    assert writers == {shard: {own_shard[shard]} for shard in writers}
    experiment_pk = rows[0][0]
    assert _counted(experiment_pk) == Assignment.objects.filter(experiment_id=experiment_pk).count() == len(rows)


@citus
@pytest.mark.django_db(transaction=True)
def test_migration_0010__distributed_database__every_node_gets_the_count_functions_that_keep_the_name():
    replace_on_citus = importlib.import_module("assignments.migrations.0010_citus_count_shard_kept")._replace_on_citus
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION assignments_count_insert() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RETURN NULL; END$$"
        )

    replace_on_citus(None, SimpleNamespace(connection=connection))

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT result FROM run_command_on_all_nodes("
            "$$SELECT prosrc FROM pg_proc WHERE proname = 'assignments_count_insert'$$)"
        )
        bodies = [body for (body,) in cursor.fetchall()]
    assert len(bodies) >= 3, "the coordinator and each worker"
    assert all("count_shard := assignments_count_shard(TG_TABLE_NAME)" in body for body in bodies), bodies


def _worker_ctl(action: str) -> None:
    """pg_ctl on the first worker of scripts/test-citus's cluster, as the user that owns it."""
    node = Path(os.environ["CITUS_DIR"]) / "node1"
    pg_ctl = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1]
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*as_owner, str(pg_ctl), "-D", str(node), "-l", str(node / "log"), "-w", "-m", "fast", action],
                   check=True, capture_output=True, timeout=60)  # fmt: skip


@citus
@pytest.mark.skipif("CITUS_DIR" not in os.environ, reason="needs scripts/test-citus's cluster directory")
@pytest.mark.django_db(transaction=True)
def test_worker_outage__503_database_unavailable_then_recovers_by_itself(api, demo_config):
    body = {"experiment_id": "checkout-button", "subject_ids": [f"w-{n}" for n in range(100)]}
    _worker_ctl("stop")
    try:
        # When a worker holding some of the batch's shards is down
        response = api.post("/experiment-assignments", body)

        # Then the batch answers 503 and stores nothing
        assert response.status_code == 503
        assert response.json()["code"] == "database_unavailable"
        assert response.headers["Retry-After"]
    finally:
        _worker_ctl("start")
    assert not Assignment.objects.filter(subject_id__startswith="w-").exists()

    # And once it is back, the same request succeeds, without a restart
    wait_until(lambda: api.post("/experiment-assignments", body).status_code == 200, timeout=30)
    assert Assignment.objects.filter(subject_id__startswith="w-").count() == 100
    assert sum(AssignmentCount.objects.values_list("assignments", flat=True)) == Assignment.objects.count()


@citus
@pytest.mark.django_db
def test_export__on_citus__read_in_pages_of_chunk_size_each_from_where_the_last_ended(demo_config):
    # Given more assignments than two pages hold
    experiment = Experiment.objects.get(key="checkout-button")
    variant = experiment.variants.first()
    Assignment.objects.bulk_create(
        Assignment(experiment=experiment, subject_id=f"p-{n:04d}", variant=variant, cohort=1) for n in range(25)
    )

    # When exported ten rows a page
    with CaptureQueriesContext(connection) as captured:
        rows = list(assignment_rows(experiment=experiment, chunk_size=10))

    # Then three pages were read, each a LIMIT the shards answer in index order, and every row came once
    statements = [query["sql"] for query in captured.captured_queries]
    pages = [sql for sql in statements if "assignments_assignment" in sql and "LIMIT 10" in sql]
    assert len(pages) == 3
    assert sorted(row[1] for row in rows) == [f"p-{n:04d}" for n in range(25)]


# Distributing a database with rows copies them into the shards: longer than the helpers' default.
MANAGE_TIMEOUT_S = 300


def _env(database_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "SECRET_KEY": "distribution-tests"}


def _manage(database_url: str, *args: str) -> str:
    return manage_output(*args, env=_env(database_url), timeout=MANAGE_TIMEOUT_S)


def _cluster_server() -> str:
    settings_dict = connection.settings_dict
    return f"postgres://{settings_dict['USER'] or 'root'}@{settings_dict['HOST']}:{settings_dict['PORT']}"


def _shard_counts(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as database:
        return dict(
            database.execute(
                "SELECT logicalrelid::regclass::text, count(*) FROM pg_dist_shard "
                "WHERE logicalrelid::regclass::text = ANY(%s) GROUP BY 1",
                [[item.table for item in DISTRIBUTED_TABLES]],
            ).fetchall()
        )


@pytest.mark.django_db
@pytest.mark.parametrize("shard_count", [0, 64001])
def test_distribute_tables__shard_count_out_of_range__refuses_and_changes_nothing(shard_count):
    with pytest.raises(CommandError, match=r"nothing changed: the shard count must be from 1 to 64000"):
        call_command("distribute_tables", shard_count=shard_count, stdout=io.StringIO())


@citus
@pytest.mark.django_db
def test_distribute_tables__shard_count__every_distributed_table_has_that_many_and_keeps_them():
    # Given a migrated database of the cluster
    server = _cluster_server()
    citus_database_create(server, "distribute_shards", 2)
    url = f"{server}/distribute_shards"
    _manage(url, "migrate")

    # When it is distributed in 4 shards
    _manage(url, "distribute_tables", "--shard-count", "4")

    # Then every distributed table has 4, and asking for another count later changes nothing
    assert _shard_counts(url) == {item.table: 4 for item in DISTRIBUTED_TABLES}
    refused = manage_run("distribute_tables", "--shard-count", "8", env=_env(url), timeout=MANAGE_TIMEOUT_S)
    assert refused.returncode != 0
    assert "distributed in 4 shards already" in refused.stderr
    assert _shard_counts(url) == {item.table: 4 for item in DISTRIBUTED_TABLES}
    assert "nothing to do" in _manage(url, "distribute_tables", "--shard-count", "4")


@citus
@pytest.mark.django_db
def test_distribute_tables__database_with_rows__rows_and_counts_kept_and_counting_and_ids_go_on(tmp_path):
    # Given a database of the cluster, migrated and used before it was distributed
    server = _cluster_server()
    citus_database_create(server, "distribute_existing", 2)
    url = f"{server}/distribute_existing"
    _manage(url, "migrate")
    _manage(url, "apply_resources", "examples/demo.yaml")
    with psycopg.connect(url, autocommit=True) as before:
        before.execute(
            "INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at) "
            "SELECT e.id, 'old-' || n, v.id, 1, now() FROM assignments_experiment e "
            "JOIN assignments_variant v ON v.experiment_id = e.id AND v.is_control, generate_series(1, 300) n "
            "WHERE e.key = 'checkout-button'"
        )

    # When it is distributed
    out = _manage(url, "distribute_tables")

    # Then every table is in place, the rows and their counts are kept, and new rows are counted
    assert "distributed table assignments_assignment by subject_id" in out
    with psycopg.connect(url, autocommit=True) as after:
        assert after.execute("SELECT count(*) FROM pg_dist_partition").fetchone()[0] == len(REFERENCE_TABLES) + len(
            DISTRIBUTED_TABLES
        )
        after.execute(
            "INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at) "
            "SELECT experiment_id, 'new-' || subject_id, variant_id, 1, now() FROM assignments_assignment"
        )
        counted, stored = after.execute(
            "SELECT (SELECT sum(assignments) FROM assignments_assignmentcount), "
            "(SELECT count(*) FROM assignments_assignment)"
        ).fetchone()
    assert (counted, stored) == (600, 600)
    # And new resources take new IDs (Citus restarts a distributed table's identity)
    lab = tmp_path / "lab.yaml"
    lab.write_text(resources.yaml_documents(resources.lab("after-distribution")))
    assert "created" in _manage(url, "apply_resources", str(lab))
