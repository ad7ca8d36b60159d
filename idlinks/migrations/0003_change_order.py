"""The change feed's columns on links, change_xid and recorded_at (core/commitorder.py), added without
rewriting the table; the index is built CONCURRENTLY, so the migration is not atomic."""

from django.db import migrations, models
from django.db.models.functions import Now

import core.commitorder
from core.commitorder import change_columns_add, change_columns_drop

TABLE = "idlinks_identifierlink"
INDEX = "identifierlink_change_order"


def _forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for statement in change_columns_add(vendor=schema_editor.connection.vendor, table=TABLE, index=INDEX):
            cursor.execute(statement)


def _backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for statement in change_columns_drop(table=TABLE, index=INDEX):
            cursor.execute(statement)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("idlinks", "0002_distribution_key")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="identifierlink",
                    name="change_xid",
                    field=models.BigIntegerField(
                        db_default=core.commitorder.TransactionOrder(), editable=False, null=True
                    ),
                ),
                migrations.AddField(
                    model_name="identifierlink",
                    name="recorded_at",
                    field=models.DateTimeField(db_default=Now(), editable=False, null=True),
                ),
                migrations.AddIndex(
                    model_name="identifierlink",
                    index=models.Index(
                        condition=models.Q(("change_xid__isnull", False)), fields=["change_xid", "id"], name=INDEX
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_forward, _backward)],
        ),
    ]
