from __future__ import annotations

from django.core.management.base import CommandError

from assignments.configuration.history import change_diff, resource_history
from assignments.configuration.resources import KINDS
from core.commands import DataOutputCommand


class Command(DataOutputCommand):
    help = "The recorded changes of one resource, newest first: version, time, who, and a diff of the document."

    def add_arguments(self, parser) -> None:
        parser.add_argument("kind", choices=KINDS, metavar="KIND", help=f"one of {', '.join(KINDS)}")
        parser.add_argument("resource_id", metavar="ID", help="the resource's ID (any case)")

    def handle(self, *args, kind: str, resource_id: str, **options) -> None:
        changes = resource_history(kind=kind, resource_id=resource_id)
        if not changes:
            raise CommandError(f"no recorded changes of {kind} {resource_id!r}")
        for index, change in enumerate(changes):
            if index:
                self.stdout.write("")
            self.stdout.write(
                f"version {change.resource_version}  {change.changed_at.isoformat()}  {change.actor} ({change.channel})"
            )
            self.stdout.write(change_diff(change))
