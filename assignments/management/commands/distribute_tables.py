from __future__ import annotations

from django.core.management.base import CommandError

from assignments.distribution import NotCitus, tables_distribute
from core.commands import ServiceCommand


class Command(ServiceCommand):
    help = (
        "On a Citus coordinator, turn the migrated database into the distributed layout "
        "(docs/how-to/scale-out-citus.md). "
        "Idempotent; prints what it distributed. On any other database it changes nothing and fails."
    )

    def handle(self, *args, **options) -> None:
        try:
            done = tables_distribute()
        except NotCitus as exc:
            raise CommandError(f"nothing changed: {exc}") from None
        for line in done:
            self.stdout.write(line)
        self.stdout.write("the layout was already distributed; nothing to do" if not done else "done")
