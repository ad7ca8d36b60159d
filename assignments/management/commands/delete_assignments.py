from __future__ import annotations

from django.core.management.base import CommandError

from assignments.console.reports import experiment_assignments_total
from assignments.data.deleting import DeleteRefused, assignments_delete, delete_check
from assignments.management.experiments import experiment_argument, experiment_named
from core.commands import ServiceCommand
from core.progress import progress_bar


class Command(ServiceCommand):
    help = (
        "Delete every assignment of an ended or archived experiment, in batches; refuses any other status and "
        "deletes nothing without --yes. Prints the count."
    )

    def add_arguments(self, parser) -> None:
        experiment_argument(parser)
        parser.add_argument("--yes", action="store_true", help="really delete (without it nothing is deleted)")

    def handle(self, *args, experiment: str, yes: bool, **options) -> None:
        found = experiment_named(experiment)
        try:
            delete_check(experiment=found)
            stored = experiment_assignments_total(found)
            if not yes:
                raise CommandError(
                    f"this would delete the {stored} assignments of {found.key}; nothing deleted: add --yes to do it"
                )
            with progress_bar(total=stored, unit="rows", description="deleting") as bar:
                deleted = assignments_delete(experiment=found, on_batch=bar.update)
        except DeleteRefused as exc:
            raise CommandError(f"nothing deleted: {exc}") from None
        self.stdout.write(f"deleted {deleted} assignments of {found.key}")
