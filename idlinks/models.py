from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from core.api.fields import SUBJECT_ID_MAX_LENGTH, subject_id_isolated
from core.commitorder import TransactionOrder

SUBJECT_TYPE = "assignments.SubjectType"


class CodePointOrder(models.Func):
    """Text compared by Unicode code point, as Python compares str, whatever the database's collation.

    The service orders a link's two identifiers in Python; the check constraint
    must agree with it, and a linguistic collation (en_US: "a" < "B") would not.
    PostgreSQL's "C" collation and SQLite's BINARY compare UTF-8 bytes, whose order
    is the code point order.
    """

    template = '%(expressions)s COLLATE "C"'
    output_field = models.CharField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return super().as_sql(compiler, connection, template="%(expressions)s COLLATE BINARY", **extra_context)


class IdentifierLink(models.Model):
    """An undirected edge between two identifiers of one subject (docs/explanation/identifier-links.md), stored once.

    The pair is kept in canonical order, (subject type pk, subject ID) of side a
    below that of side b, so A-B and B-A are the same row: identifierlink_canonical_order
    holds every writer to that order, and identifierlink_pair_unique then settles
    concurrent identical links (INSERT ... ON CONFLICT DO NOTHING skips the loser).
    """

    # By its label, not an import: the one thing idlinks knows of the app above it is the table of
    # subject types its identifiers name. db_index=False: identifierlink_pair_unique and
    # identifierlink_b_lookup lead with these columns.
    subject_type_a = models.ForeignKey(SUBJECT_TYPE, on_delete=models.PROTECT, related_name="+", db_index=False)
    subject_id_a = models.CharField(max_length=SUBJECT_ID_MAX_LENGTH)
    subject_type_b = models.ForeignKey(SUBJECT_TYPE, on_delete=models.PROTECT, related_name="+", db_index=False)
    subject_id_b = models.CharField(max_length=SUBJECT_ID_MAX_LENGTH)
    created_at = models.DateTimeField(default=timezone.now)
    # For copies of the links kept elsewhere: the transaction that stored the link, and when
    # (core/commitorder.py). Database defaults: the INSERT names neither. Null on links stored before.
    change_xid = models.BigIntegerField(null=True, editable=False, db_default=TransactionOrder())
    recorded_at = models.DateTimeField(null=True, editable=False, db_default=Now())

    class Meta:
        constraints = [
            # Its index also finds the links of an identifier on side a.
            models.UniqueConstraint(
                fields=["subject_type_a", "subject_id_a", "subject_type_b", "subject_id_b"],
                name="identifierlink_pair_unique",
            ),
            # Also rules out linking an identifier to itself.
            models.CheckConstraint(
                condition=models.Q(subject_type_a__lt=models.F("subject_type_b"))
                | models.Q(subject_type_a=models.F("subject_type_b"), subject_id_a__lt=CodePointOrder("subject_id_b")),
                name="identifierlink_canonical_order",
            ),
        ]
        indexes = [
            # The links of an identifier on side b, for walking the link graph.
            models.Index(fields=["subject_type_b", "subject_id_b"], name="identifierlink_b_lookup"),
            # export_id_links --since pages through links by time.
            models.Index(fields=["created_at"], name="identifierlink_created"),
            models.Index(
                fields=["change_xid", "id"],
                name="identifierlink_change_order",
                condition=models.Q(change_xid__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        a, b = subject_id_isolated(self.subject_id_a), subject_id_isolated(self.subject_id_b)
        return f"{self.subject_type_a.key}:{a} - {self.subject_type_b.key}:{b}"
