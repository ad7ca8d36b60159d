from __future__ import annotations

from assignments.configuration.export import resources_export
from assignments.configuration.resources import KINDS
from core.commands import DataOutputCommand


class Command(DataOutputCommand):
    help = "Print the configuration as YAML that apply_resources accepts unchanged."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--kind", choices=KINDS, help="only resources of this kind")

    def handle(self, *args, kind: str | None, **options) -> None:
        self.stdout.write(resources_export(kind=kind), ending="")
