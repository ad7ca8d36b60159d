from __future__ import annotations

from django.conf import settings

from assignments.data.change_log import PRUNE_BATCH_SIZE, changes_prune
from assignments.data.changes import change_retention
from core.commands import ServiceCommand


class Command(ServiceCommand):
    help = (
        "Drop the change feed's changes older than CHANGES_RETENTION_DAYS, in batches, and mark where the feed "
        "is now for a later run; run it daily (docs/how-to/keep-a-warehouse-copy.md). Prints what it dropped."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=PRUNE_BATCH_SIZE,
            metavar="N",
            help=f"changes dropped per transaction (default {PRUNE_BATCH_SIZE})",
        )

    def handle(self, *args, batch_size: int, **options) -> None:
        dropped = changes_prune(batch_size=max(batch_size, 1))
        self.stdout.write(
            f"dropped {dropped} logged changes older than {settings.CHANGES_RETENTION_DAYS} days; "
            f"the feed starts after {change_retention().floor.cursor()}"
        )
