"""Primary keys that include the column a Citus cluster distributes the table by (docs/how-to/scale-out-citus.md).

Citus refuses a distributed table whose primary key or unique constraints leave
out the distribution column. On PostgreSQL the primary key of
assignments_assignment becomes (id, subject_id) and that of
assignments_assignmentcount (id, shard); `id` stays Django's primary key and
stays unique, drawn from its identity. The schema is then the same on PostgreSQL
and on a Citus coordinator, and `manage.py distribute_tables` only distributes.

The new keys' indexes are built CONCURRENTLY, so the migration is not atomic
(core/primarykeys.py).

AssignmentCount.shard becomes text, the type of subject_id, which Citus requires
of tables it co-locates: on Citus each shard of the assignments keeps its counts
in the co-located shard of the counts (distribute_tables). SQLite keeps its
primary keys: it is never distributed.
"""

import importlib

from django.db import migrations, models

from core.primarykeys import primary_key_replace

# Migration 0004's statements: its count functions' upsert, and SQLite's triggers. SQLite
# rebuilds the counts table to change a column's type, and refuses to while those
# triggers name it: they are dropped for the rebuild and made again.
_triggers = importlib.import_module("assignments.migrations.0004_assignment_count_triggers")
SHARDS = _triggers.SHARDS
SQLITE_TRIGGERS_DROP = _triggers.SQLITE_BACKWARD
SQLITE_TRIGGERS_CREATE = [statement for statement in _triggers.SQLITE_FORWARD if "CREATE TRIGGER" in statement]


def _postgres_function(name: str, *steps: tuple[str, str], shard: str) -> str:
    # The functions of migration 0004, with the shard written as `shard`.
    body = ";\n".join(_triggers.POSTGRES_UPSERT.format(shard=shard, sign=sign, rows=rows) for rows, sign in steps)
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n{body};\nRETURN NULL;\nEND\n$$"
    )


def _count_functions(shard: str) -> list[str]:
    return [
        _postgres_function("assignments_count_insert", ("new_rows", ""), shard=shard),
        _postgres_function("assignments_count_delete", ("old_rows", "-"), shard=shard),
        _postgres_function("assignments_count_update", ("old_rows", "-"), ("new_rows", ""), shard=shard),
    ]


def _run_on(vendor: str, statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != vendor:
            return
        with schema_editor.connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    return run


FORWARD = [
    *primary_key_replace("assignments_assignment", "id, subject_id"),
    *primary_key_replace("assignments_assignmentcount", "id, shard"),
    *_count_functions(f"(pg_backend_pid() % {SHARDS})::text"),
]
# The primary keys may stay as they are; the functions must write the shard as a number again.
BACKWARD = _count_functions(f"pg_backend_pid() % {SHARDS}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("assignments", "0005_experiment_follow_links")]

    operations = [
        migrations.RunPython(_run_on("sqlite", SQLITE_TRIGGERS_DROP), _run_on("sqlite", SQLITE_TRIGGERS_CREATE)),
        migrations.AlterField(
            model_name="assignmentcount",
            name="shard",
            field=models.CharField(max_length=40),
        ),
        migrations.RunPython(_run_on("sqlite", SQLITE_TRIGGERS_CREATE), _run_on("sqlite", SQLITE_TRIGGERS_DROP)),
        migrations.RunPython(_run_on("postgresql", FORWARD), _run_on("postgresql", BACKWARD)),
    ]
