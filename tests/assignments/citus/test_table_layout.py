"""assignments/citus/table_layout.py: the tables' layout on Citus (docs/how-to/scale-out-citus.md):
distribute_tables, its shard count, a database with rows distributed, the count trigger and migration 0010.

scripts/test-citus runs these on a coordinator with two workers, where the
suite's own setup has run distribute_tables; on PostgreSQL and SQLite only the
refusals run.
"""

from __future__ import annotations

import importlib
import io
from types import SimpleNamespace

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from assignments.citus.table_layout import DISTRIBUTED_TABLES, REFERENCE_TABLES
from assignments.models import Assignment
from assignments.storage import assignments_insert
from assignments.storage_citus import (
    assignments_distributed,
)
from devtools.citus import citus_database_create
from tests.helpers import resources
from tests.helpers.assignments import assignments_counted, new_rows
from tests.helpers.database import assignments_shard_count, citus, on_citus
from tests.helpers.processes import manage_output, manage_run


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


@citus
@pytest.mark.django_db(transaction=True)
def test_count_trigger__one_connection_on_every_shard__each_counted_in_its_own_shards_counts(demo_config):
    # Each worker connection keeps the name of a shard's counts once it has looked it up (distribution.py):
    # one subject at a time through one connection, ten a shard on average and so mostly with the name kept,
    # must count each subject in the counts co-located with its own shard, never in another one looked up.
    rows, _ = new_rows("c", 320)

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
    assert (
        assignments_counted(experiment_pk)
        == Assignment.objects.filter(experiment_id=experiment_pk).count()
        == len(rows)
    )


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
