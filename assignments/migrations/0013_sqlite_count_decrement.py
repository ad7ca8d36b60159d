"""SQLite's count triggers take an assignment off its count row rather than upsert a count of -1.

The upsert of migration 0004 wrote a new count row when the assignment's was gone.
Django's flush (`manage.py flush`, and the end of every transactional test) deletes
every table in one transaction, in an order that changes from run to run: where it
deleted the counts before the assignments, each deleted assignment wrote a count of
-1 again, for an experiment the flush deletes too, and the flush failed on the
foreign key. A count row is only ever made by an insert, so a deletion has one to
take from or none to keep. PostgreSQL's flush truncates (no trigger), and its
statement-level functions keep their upsert: each backend writes its own shard,
where a deletion's -1 may be the first row.
"""

import importlib

from django.db import migrations

_counts = importlib.import_module("assignments.migrations.0004_assignment_count_triggers")
_keys = importlib.import_module("assignments.migrations.0006_distribution_keys")
_feed = importlib.import_module("assignments.migrations.0011_change_feed")

SQLITE_DECREMENT = """
UPDATE assignments_assignmentcount SET assignments = assignments - 1
WHERE experiment_id = OLD.experiment_id AND cohort = OLD.cohort AND variant_id = OLD.variant_id
AND source = OLD.source AND day = date(OLD.created_at) AND shard = 0;
"""
SQLITE_COUNT_DELETE = (
    f"CREATE TRIGGER assignments_count_delete AFTER DELETE ON assignments_assignment BEGIN{SQLITE_DECREMENT}END"
)
# As migration 0011 made it, for the columns counted only.
SQLITE_COUNT_UPDATE = (
    "CREATE TRIGGER assignments_count_update AFTER UPDATE OF experiment_id, cohort, variant_id, source, created_at "
    f"ON assignments_assignment BEGIN{SQLITE_DECREMENT}{_counts.SQLITE_UPSERT.format(row='NEW', delta=1)}END"
)
DROP = ["DROP TRIGGER assignments_count_delete", "DROP TRIGGER assignments_count_update"]
FORWARD = [*DROP, SQLITE_COUNT_DELETE, SQLITE_COUNT_UPDATE]
BACKWARD = [
    *DROP,
    next(statement for statement in _counts.SQLITE_FORWARD if "assignments_count_delete" in statement),
    _feed.SQLITE_COUNT_UPDATE,
]


class Migration(migrations.Migration):
    dependencies = [("assignments", "0012_variant_values")]

    operations = [migrations.RunPython(_keys._run_on("sqlite", FORWARD), _keys._run_on("sqlite", BACKWARD))]
