from __future__ import annotations

from django.core.management.base import CommandError

from assignments.citus.table_layout import SHARD_COUNT_MAX, NotCitus, tables_distribute
from core.commands import ServiceCommand


class Command(ServiceCommand):
    help = (
        "On a Citus coordinator, turn the migrated database into the distributed layout "
        "(docs/how-to/scale-out-citus.md). "
        "Idempotent; prints what it distributed. On any other database it changes nothing and fails."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--shard-count",
            type=int,
            metavar="N",
            help=(
                f"shards per distributed table, 1 to {SHARD_COUNT_MAX} (default: the server's citus.shard_count, "
                "32 unless set); fixed once the tables are distributed (docs/how-to/scale-out-citus.md)"
            ),
        )

    def handle(self, *args, **options) -> None:
        try:
            done = tables_distribute(shard_count=options["shard_count"])
        except (NotCitus, ValueError) as exc:
            raise CommandError(f"nothing changed: {exc}") from None
        for line in done:
            self.stdout.write(line)
        self.stdout.write("the layout was already distributed; nothing to do" if not done else "done")
