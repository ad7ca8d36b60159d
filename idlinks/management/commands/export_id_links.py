from __future__ import annotations

import datetime as dt
from pathlib import Path

from django.db import connection

from core.commands import ExportCommand
from core.exports import ExportFormat
from idlinks.exports import ID_LINK_COLUMNS, id_link_rows
from idlinks.models import IdentifierLink


class Command(ExportCommand):
    help = (
        "Stream the identifier links (subject_type_a, subject_id_a, subject_type_b, subject_id_b, created_at) "
        "as CSV or JSON Lines, oldest first, in constant memory."
    )

    def add_arguments(self, parser) -> None:
        self.add_export_arguments(
            parser,
            since_help="only links made at or after this time, e.g. 2026-11-01 or 2026-11-01T10:00:00Z "
            "(a time without offset is UTC)",
        )

    def handle(
        self,
        *args,
        format: ExportFormat,
        since: dt.datetime | None,
        output: Path | None,
        spreadsheet_safe: bool,
        **options,
    ) -> None:
        count = self.export(
            rows=lambda: id_link_rows(since=since),
            columns=ID_LINK_COLUMNS,
            export_format=format,
            output=output,
            total=self.estimated_count(),
            unit="links",
            spreadsheet_safe=spreadsheet_safe,
        )
        if count is not None:
            self.stdout.write(f"exported {count} identifier links to {output}")

    def estimated_count(self) -> int | None:
        """The planner's estimate on PostgreSQL (COUNT(*) would read the whole table first), for the progress bar."""
        if connection.vendor != "postgresql":
            return None
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [IdentifierLink._meta.db_table]
            )
            estimate = cursor.fetchone()[0]
        return estimate if estimate >= 0 else None
