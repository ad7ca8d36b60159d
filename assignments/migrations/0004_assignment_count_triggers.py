"""Triggers that keep assignments_assignmentcount exact, and its first fill from existing assignments.

PostgreSQL: one statement-level trigger per event, reading the statement's
transition table, so a 1000-row insert does one grouped upsert, not 1000. The
upserts run in a fixed order (ORDER BY the conflict key) so two statements that
meet on the same count rows lock them in the same order. Each backend writes its
own shard (pg_backend_pid() % 32, AssignmentCount.COUNT_SHARDS), so concurrent
requests do not wait on each other's count rows until commit.
SQLite: row-level triggers (it has no transition tables, and one writer at a time).
Days are UTC.
"""

from django.db import migrations

SHARDS = 32

POSTGRES_UPSERT = """
INSERT INTO assignments_assignmentcount AS c (experiment_id, cohort, variant_id, source, day, shard, assignments)
SELECT experiment_id, cohort, variant_id, source, (created_at AT TIME ZONE 'UTC')::date, {shard}, {sign} count(*)
FROM {rows}
GROUP BY 1, 2, 3, 4, 5, 6
ORDER BY 1, 2, 3, 4, 5, 6
ON CONFLICT (experiment_id, cohort, variant_id, source, day, shard)
DO UPDATE SET assignments = c.assignments + EXCLUDED.assignments
"""


def _postgres_function(name: str, *steps: tuple[str, str]) -> str:
    body = ";\n".join(
        POSTGRES_UPSERT.format(shard=f"pg_backend_pid() % {SHARDS}", sign=sign, rows=rows) for rows, sign in steps
    )
    return f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n{body};\nRETURN NULL;\nEND\n$$"


POSTGRES_FORWARD = [
    _postgres_function("assignments_count_insert", ("new_rows", "")),
    _postgres_function("assignments_count_delete", ("old_rows", "-")),
    _postgres_function("assignments_count_update", ("old_rows", "-"), ("new_rows", "")),
    """CREATE TRIGGER assignments_count_insert AFTER INSERT ON assignments_assignment
       REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION assignments_count_insert()""",
    """CREATE TRIGGER assignments_count_delete AFTER DELETE ON assignments_assignment
       REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION assignments_count_delete()""",
    """CREATE TRIGGER assignments_count_update AFTER UPDATE ON assignments_assignment
       REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION assignments_count_update()""",
    POSTGRES_UPSERT.format(shard="0", sign="", rows="assignments_assignment"),
]

POSTGRES_BACKWARD = [
    "DROP TRIGGER assignments_count_insert ON assignments_assignment",
    "DROP TRIGGER assignments_count_delete ON assignments_assignment",
    "DROP TRIGGER assignments_count_update ON assignments_assignment",
    "DROP FUNCTION assignments_count_insert()",
    "DROP FUNCTION assignments_count_delete()",
    "DROP FUNCTION assignments_count_update()",
]

SQLITE_UPSERT = """
INSERT INTO assignments_assignmentcount (experiment_id, cohort, variant_id, source, day, shard, assignments)
VALUES ({row}.experiment_id, {row}.cohort, {row}.variant_id, {row}.source, date({row}.created_at), 0, {delta})
ON CONFLICT (experiment_id, cohort, variant_id, source, day, shard) DO UPDATE SET assignments = assignments + {delta};
"""

SQLITE_FORWARD = [
    f"CREATE TRIGGER assignments_count_insert AFTER INSERT ON assignments_assignment BEGIN"
    f"{SQLITE_UPSERT.format(row='NEW', delta=1)}END",
    f"CREATE TRIGGER assignments_count_delete AFTER DELETE ON assignments_assignment BEGIN"
    f"{SQLITE_UPSERT.format(row='OLD', delta=-1)}END",
    f"CREATE TRIGGER assignments_count_update AFTER UPDATE ON assignments_assignment BEGIN"
    f"{SQLITE_UPSERT.format(row='OLD', delta=-1)}{SQLITE_UPSERT.format(row='NEW', delta=1)}END",
    """INSERT INTO assignments_assignmentcount (experiment_id, cohort, variant_id, source, day, shard, assignments)
       SELECT experiment_id, cohort, variant_id, source, date(created_at), 0, count(*)
       FROM assignments_assignment GROUP BY 1, 2, 3, 4, 5""",
]

SQLITE_BACKWARD = [
    "DROP TRIGGER assignments_count_insert",
    "DROP TRIGGER assignments_count_delete",
    "DROP TRIGGER assignments_count_update",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        with schema_editor.connection.cursor() as cursor:
            for statement in statements_by_vendor[schema_editor.connection.vendor]:
                cursor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("assignments", "0003_history_sources_and_counts")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": POSTGRES_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        )
    ]
