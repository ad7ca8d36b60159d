"""A primary key that includes the column a Citus cluster distributes links by: (id, subject_id_a).

As assignments/migrations/0006_distribution_keys.py does for the assignments:
`id` stays Django's primary key and stays unique, drawn from its identity; the
index is built CONCURRENTLY, so the migration is not atomic. SQLite is never
distributed and keeps its key.
"""

from django.db import migrations

from core.primarykeys import primary_key_replace


def _forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for statement in primary_key_replace("idlinks_identifierlink", "id, subject_id_a"):
            cursor.execute(statement)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("idlinks", "0001_initial")]

    operations = [migrations.RunPython(_forward, migrations.RunPython.noop)]
