"""assignments/storage_citus.py: the hot path's statements on Citus (docs/how-to/scale-out-citus.md): their
plans, the batch's read and write one statement per shard, the export's pages, and a worker's outage.

scripts/test-citus runs these on a coordinator with two workers, where the suite's own setup has run
distribute_tables; on PostgreSQL the Citus insert's quoting runs too.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assignments.data.exports import assignment_rows
from assignments.models import Assignment, AssignmentCount, Experiment
from assignments.storage import POSTGRES_HEAD_CATALOG, POSTGRES_HEAD_EXPERIMENT, assignments_insert
from assignments.storage_citus import (
    CITUS_SHARDS,
    citus_fetch_rows,
    citus_fetch_sql,
    citus_insert,
    citus_shard_rows,
)
from tests.helpers.assignments import assignments_counted, new_rows
from tests.helpers.database import assignments_shard_count, citus
from tests.helpers.server import wait_until


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
    [
        (citus_fetch_sql(POSTGRES_HEAD_EXPERIMENT, one_subject=True), [1, [1], "u-1"]),
        (citus_fetch_sql(POSTGRES_HEAD_EXPERIMENT, one_subject=False), [1, [1], ["u-1"]]),
    ],
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

    plan = _plan(citus_fetch_sql(POSTGRES_HEAD_EXPERIMENT, one_subject=False), [1, [1], subjects])

    tasks = [node["Distributed Query"]["Job"]["Task Count"] for node in _nodes(plan) if "Distributed Query" in node]
    assert max(tasks) == assignments_shard_count()
    scans = [node for node in _nodes(plan) if "Relation Name" in node and "assignment_" in node["Relation Name"]]
    assert scans, "a shard scan is shown"
    assert all(node.get("Index Name", "").startswith("assignment_experiment_subject_unique") for node in scans), (
        json.dumps(scans)[:500]
    )


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
    rows, created = new_rows("one", 2)
    experiment_pk = rows[0][0]
    asked = []

    with connection.cursor() as cursor:
        execute = _execute(cursor, asked)
        execute(citus_insert(rows[:1], created, context=connection.connection), None)
        asked.clear()
        # The stored subject, then one never stored
        (stored, shards), (missing, _) = [
            citus_fetch_rows(
                execute,
                head_sql=POSTGRES_HEAD_EXPERIMENT,
                head=[experiment_pk],
                experiments=[experiment_pk],
                subject_ids=[subject_id],
            )
            for subject_id in ("one-0000", "one-0001")
        ]

    assert asked == [citus_fetch_sql(POSTGRES_HEAD_EXPERIMENT, one_subject=True)] * 2
    version = Experiment.objects.get(pk=experiment_pk).resource_version
    assert stored == [(None, None, None, None, None, version), (*rows[0][:5], None)]
    assert shards is None
    assert missing == [(None, None, None, None, None, version)]


@citus
@pytest.mark.django_db
def test_shard_rows__1000_subjects__one_group_per_shard_in_shard_order_its_insert_routed_there(demo_config):
    rows, created = new_rows("n", 1000)

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
    rows, _ = new_rows("k", 1000)
    asked = []

    with connection.cursor() as cursor:
        execute = _execute(cursor, asked)
        _, shards = citus_fetch_rows(
            execute, head_sql=POSTGRES_HEAD_CATALOG, head=[], experiments=[rows[0][0]], subject_ids=[r[1] for r in rows]
        )
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
    assert assignments_counted(experiment.pk) == len(rows)


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
    assert assignments_counted(experiment.pk) == len(rows)


@citus
@pytest.mark.django_db
def test_insert__in_a_transaction_a_shards_copy_refused__rolled_back_to_its_savepoint_then_inserted(demo_config):
    rows, created = new_rows("t", 200)
    assignments_insert(rows=rows[::2], created_at=created)

    with transaction.atomic():
        inserted = assignments_insert(rows=rows, created_at=created)
        assert Assignment.objects.filter(subject_id__startswith="t-").count() == len(rows)

    assert inserted == {(pk, subject_id): variant for pk, subject_id, variant, *_ in rows[1::2]}


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
