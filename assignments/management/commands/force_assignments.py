from __future__ import annotations

from django.core.management.base import CommandError

from assignments.data.forcing import ForceRefused, assignments_force
from assignments.management.experiments import experiment_argument, experiment_named
from core.commands import ServiceCommand


class Command(ServiceCommand):
    help = (
        "Store assignments with source `forced` (for QA) for subjects that have none. A subject that already has "
        "one is reported and kept, unless it is forced and --replace is given. Prints `forced N, kept M`."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("subject_ids", nargs="+", metavar="SUBJECT_ID", help="subject IDs, exact")
        experiment_argument(parser)
        parser.add_argument("--variant", required=True, metavar="VARIANT", help="variant ID (any case)")
        parser.add_argument("--reason", default="", metavar="TEXT", help="why, kept with each forced assignment")
        parser.add_argument(
            "--replace", action="store_true", help="also re-force subjects whose assignment is already forced"
        )

    def handle(
        self, *args, subject_ids: list[str], experiment: str, variant: str, reason: str, replace: bool, **options
    ) -> None:
        found = experiment_named(experiment)
        try:
            result = assignments_force(
                experiment=found, variant_id=variant, subject_ids=subject_ids, reason=reason, replace=replace
            )
        except ForceRefused as exc:
            raise CommandError(f"nothing forced: {exc}") from None
        for kept in result.kept:
            why = "" if kept.source != "forced" else " (forced: --replace to change it)"
            self.stdout.write(f"kept {kept.subject_id}: {kept.variant_id}, {kept.source}{why}")
        self.stdout.write(f"forced {len(result.forced)}, kept {len(result.kept)}")
