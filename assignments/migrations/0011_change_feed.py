"""The change feed (assignments/data/changes.py): the assignments' change_xid and recorded_at
(core/commitorder.py), added without rewriting the table; the log of replaced and deleted assignments; the
horizon marks of its retention. On SQLite, the counter that orders changes there, and the triggers that stamp
each new assignment and link with it.

The indexes on the assignments are built CONCURRENTLY, so the migration is not atomic.
"""

import importlib

import django.utils.timezone
from django.db import migrations, models
from django.db.models.functions import Now

import core.commitorder
from core.commitorder import change_columns_add, change_columns_drop
from core.primarykeys import primary_key_replace

TABLE = "assignments_assignment"
INDEX = "assignment_change_order"
LINKS = "idlinks_identifierlink"

_counts = importlib.import_module("assignments.migrations.0004_assignment_count_triggers")

# One writer at a time on SQLite, so a counter advanced by each row written is the commit order.
SQLITE_STAMP = """
CREATE TRIGGER {table}_change_order AFTER INSERT ON {table} WHEN NEW.change_xid IS NULL BEGIN
UPDATE assignments_changeclock SET value = value + 1;
UPDATE {table} SET change_xid = (SELECT value FROM assignments_changeclock),
    recorded_at = coalesce(NEW.recorded_at, strftime('%Y-%m-%d %H:%M:%f', 'now'))
WHERE id = NEW.id;
END
"""
# The count trigger of migration 0004, now only for the columns counted: stamping a new row updates it.
SQLITE_COUNT_UPDATE = (
    "CREATE TRIGGER assignments_count_update AFTER UPDATE OF experiment_id, cohort, variant_id, source, created_at "
    f"ON assignments_assignment BEGIN{_counts.SQLITE_UPSERT.format(row='OLD', delta=-1)}"
    f"{_counts.SQLITE_UPSERT.format(row='NEW', delta=1)}END"
)
SQLITE_FORWARD = [
    "CREATE TABLE assignments_changeclock (id integer PRIMARY KEY CHECK (id = 1), value integer NOT NULL)",
    "INSERT INTO assignments_changeclock (id, value) VALUES (1, 0)",
    SQLITE_STAMP.format(table=TABLE),
    SQLITE_STAMP.format(table=LINKS),
    "DROP TRIGGER assignments_count_update",
    SQLITE_COUNT_UPDATE,
]
SQLITE_BACKWARD = [
    f"DROP TRIGGER {TABLE}_change_order",
    f"DROP TRIGGER {LINKS}_change_order",
    "DROP TABLE assignments_changeclock",
    "DROP TRIGGER assignments_count_update",
    next(statement for statement in _counts.SQLITE_FORWARD if "assignments_count_update" in statement),
]


def _forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    statements = change_columns_add(vendor=vendor, table=TABLE, index=INDEX)
    if vendor == "postgresql":
        # A Citus cluster distributes the log by subject ID (assignments/citus/table_layout.py).
        statements += primary_key_replace("assignments_assignmentchange", "id, subject_id")
    else:
        statements += SQLITE_FORWARD
    with schema_editor.connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def _backward(apps, schema_editor):
    statements = change_columns_drop(table=TABLE, index=INDEX)
    if schema_editor.connection.vendor != "postgresql":
        statements = SQLITE_BACKWARD + statements
    with schema_editor.connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("assignments", "0010_citus_count_shard_kept"),
        ("idlinks", "0003_change_order"),
    ]

    operations = [
        migrations.CreateModel(
            name="AssignmentChange",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("change_xid", models.BigIntegerField()),
                ("rank", models.SmallIntegerField(choices=[(0, "Created"), (2, "Replaced"), (3, "Deleted")])),
                ("assignment_id", models.BigIntegerField()),
                ("recorded_at", models.DateTimeField()),
                ("experiment_key", models.CharField(max_length=100)),
                ("subject_id", models.CharField(max_length=256)),
                ("variant_key", models.CharField(max_length=100)),
                ("cohort", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField()),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("hashed", "Hashed"),
                            ("linked", "Linked"),
                            ("forced", "Forced"),
                            ("imported", "Imported"),
                        ],
                        max_length=10,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("change_xid", "rank", "assignment_id", "subject_id"),
                        name="assignmentchange_order_unique",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ChangeMark",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("horizon", models.BigIntegerField()),
                ("observed_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ("last_xid", models.BigIntegerField(null=True)),
                ("last_rank", models.SmallIntegerField(null=True)),
                ("last_row", models.BigIntegerField(null=True)),
                ("pruned", models.BooleanField(default=False)),
            ],
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="assignment",
                    name="change_xid",
                    field=models.BigIntegerField(
                        db_default=core.commitorder.TransactionOrder(), editable=False, null=True
                    ),
                ),
                migrations.AddField(
                    model_name="assignment",
                    name="recorded_at",
                    field=models.DateTimeField(db_default=Now(), editable=False, null=True),
                ),
                migrations.AddIndex(
                    model_name="assignment",
                    index=models.Index(
                        condition=models.Q(("change_xid__isnull", False)), fields=["change_xid", "id"], name=INDEX
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_forward, _backward)],
        ),
    ]
