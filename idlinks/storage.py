"""The SQL of /id-link: one statement per link."""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from core.database import statement_cursor

# identifierlink_pair_unique settles concurrent identical links: the loser inserts nothing.
# One statement in autocommit, where bulk_create(ignore_conflicts=True) would wrap it in a
# transaction of its own (three round trips).
INSERT = """
INSERT INTO idlinks_identifierlink (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, created_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b) DO NOTHING
"""


def id_link_insert(
    *, subject_type_a: int, subject_id_a: str, subject_type_b: int, subject_id_b: str, created_at: datetime
) -> None:
    """Store one link, already in canonical order; nothing if the pair was stored before."""
    # Prepared: its one plan does not depend on the table's size.
    with statement_cursor(table=None) as cursor:
        cursor.execute(
            INSERT,
            [
                subject_type_a,
                subject_id_a,
                subject_type_b,
                subject_id_b,
                connection.ops.adapt_datetimefield_value(created_at),
            ],
        )
