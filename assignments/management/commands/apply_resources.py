from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import CommandError

from assignments.configuration.apply import Actor, ApplyResult, resources_apply
from assignments.configuration.resources import ResourceInvalid, ResourceProblem, resources_parse
from core.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Validate YAML resource files, then apply all of them in one transaction or none."

    def add_arguments(self, parser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE", help="YAML files of resources ('-' for stdin)")
        parser.add_argument("--dry-run", action="store_true", help="validate and report, change nothing")

    def handle(self, *args, files: list[str], dry_run: bool, **options) -> None:
        try:
            results = self.apply(files, dry_run=dry_run)
        except ResourceInvalid as exc:
            raise CommandError("\n".join(["resources not applied:", *exc.errors])) from None
        for result in results:
            self.stdout.write(str(result))
        if dry_run:
            self.stdout.write("dry run: nothing was changed")

    def apply(self, files: list[str], *, dry_run: bool) -> list[ApplyResult]:
        specs = []
        errors = []
        for file in files:
            try:
                text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                errors.append(ResourceProblem(file, "", f"cannot read: {exc}"))
                continue
            try:
                specs.extend(resources_parse(text, file=file))
            except ResourceInvalid as exc:
                errors.extend(exc.problems)
        if errors:
            raise ResourceInvalid(errors)
        return resources_apply(specs=specs, actor=Actor.command(), dry_run=dry_run)
