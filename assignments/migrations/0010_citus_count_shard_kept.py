"""On a database already in the Citus layout, the count triggers' functions as distribute_tables now makes
them: each connection looks up the counts' shard once and keeps its name (assignments/citus/table_layout.py).

Elsewhere (PostgreSQL, SQLite, a Citus database not distributed yet) there is nothing to do:
distribute_tables makes these functions when it distributes the tables. They are today's, imported:
a later change to them comes with a migration of its own, which replaces them again. Going back keeps
them, since they count exactly as the ones before did.
"""

from django.db import migrations

from assignments.citus.table_layout import CITUS_COUNT_FUNCTIONS
from core.citus import distributed_asked


def _replace_on_citus(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        if not distributed_asked(cursor, "assignments_assignment"):
            return
        for statement in CITUS_COUNT_FUNCTIONS:
            cursor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("assignments", "0009_holdout_pages"),
    ]

    operations = [
        migrations.RunPython(_replace_on_citus, migrations.RunPython.noop, elidable=True),
    ]
