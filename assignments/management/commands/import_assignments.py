from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from assignments.data.importing import ImportInvalid, ImportRefused, assignments_import
from assignments.management.experiments import experiment_argument, experiment_named
from core.commands import ServiceCommand
from core.progress import progress_bar


class Command(ServiceCommand):
    help = (
        "Backfill assignments from a CSV file with the header subject_id,variant_id[,created_at] (source "
        "`imported`, the experiment's current cohort). The whole file is checked before anything is written; "
        "existing assignments are never overwritten but counted as conflicts. Prints `imported N, conflicts M`."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path, metavar="FILE", help="CSV file, UTF-8")
        experiment_argument(parser)
        parser.add_argument(
            "--atomic",
            action="store_true",
            help="all rows or none in one transaction; without it each batch commits, and a run that stops "
            "can be run again (what it wrote comes back as conflicts)",
        )

    def handle(self, *args, file: Path, experiment: str, atomic: bool, **options) -> None:
        found = experiment_named(experiment)
        try:
            with progress_bar(total=None, unit="rows", description="importing") as bar:

                def validated(rows: int) -> None:
                    bar.total = rows
                    bar.refresh()

                result = assignments_import(
                    path=file, experiment=found, atomic=atomic, on_validated=validated, on_batch=bar.update
                )
        except ImportRefused as exc:
            raise CommandError(f"nothing imported: {exc}") from None
        except ImportInvalid as exc:
            raise CommandError(f"{file}: nothing imported, {exc.total} error(s):\n{exc}") from None
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from None
        self.stdout.write(f"imported {result.imported}, conflicts {result.conflicts}")
