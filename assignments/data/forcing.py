"""QA overrides (force_assignments and the admin's subject lookup): a chosen variant for chosen subjects.

A forced assignment is stored like any other, so the API returns it as it returns
every stored assignment; it has source `forced` and a reason, and the
sample-ratio test leaves it out. Only a subject without an assignment is forced:
a hashed, linked or imported assignment is never overwritten. The one exception
to "assignments are immutable": with `replace`, a forced assignment may be
forced again to another variant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from assignments.data.change_log import replacements_record
from assignments.models import Assignment, Experiment, Variant
from assignments.selectors import experiment_cohort_current
from assignments.storage import StoredRow, assignments_insert_rows
from core.api.fields import character_problem, subject_id_problem

REASON_MAX_LENGTH = 500
# Forcing serves nobody once an experiment has stopped assigning for good.
FORCEABLE_STATUSES = (Experiment.Status.DRAFT, Experiment.Status.ACTIVE, Experiment.Status.WINNER_DECLARED)


# An assignment's row as the change feed records it (StoredRow).
STORED_FIELDS = ("id", "subject_id", "variant_id", "cohort", "created_at", "source", "change_xid", "recorded_at")


class ForceRefused(Exception):
    """Nothing was stored: the message says why."""


@dataclass(frozen=True)
class KeptAssignment:
    subject_id: str
    variant_id: str
    source: str


@dataclass(frozen=True)
class ForceResult:
    forced: list[str]
    kept: list[KeptAssignment]


def assignments_force(
    *, experiment: Experiment, variant_id: str, subject_ids: Sequence[str], reason: str, replace: bool
) -> ForceResult:
    """Store `variant_id` with source `forced` for each subject that has no assignment (or, with
    `replace`, a forced one); report the others as kept. One transaction."""
    if experiment.kind == Experiment.Kind.HOLDOUT:
        # A holdout measures what the experiments it covers did: a member chosen by hand would bias it.
        raise ForceRefused(f"{experiment.key!r} is a holdout: its members are drawn, never forced")
    if experiment.status not in FORCEABLE_STATUSES:
        raise ForceRefused(
            f"experiment {experiment.key!r} is {experiment.status}; assignments can be forced only while it is "
            f"{', '.join(FORCEABLE_STATUSES)}"
        )
    variant = Variant.objects.filter(experiment=experiment).get_ci(variant_id)
    if variant is None:
        raise ForceRefused(f"experiment {experiment.key!r} has no variant {variant_id!r}")
    problems = [f"subject ID {sid!r}: {problem}" for sid in subject_ids if (problem := subject_id_problem(sid))]
    if len(reason) > REASON_MAX_LENGTH:
        problems.append(f"the reason must be at most {REASON_MAX_LENGTH} characters")
    if reason_problem := character_problem(reason):
        problems.append(f"the reason {reason_problem}")
    if problems:
        raise ForceRefused("; ".join(problems))
    subjects = sorted(set(subject_ids))
    now = timezone.now()
    with transaction.atomic():
        cohort = experiment_cohort_current(experiment_pk=experiment.pk)
        replaced: set[str] = set()
        if replace:
            replaced_query = Assignment.objects.filter(
                experiment=experiment, source=Assignment.Source.FORCED, subject_id__in=subjects
            )
            # Locks the rows first (an UPDATE does on Citus too, where a SELECT ... FOR UPDATE over several
            # shards is refused), so the change feed records them as this transaction replaces them.
            replaced_query.update(reason=F("reason"))
            before = [StoredRow(*row) for row in replaced_query.order_by("id").values_list(*STORED_FIELDS)]
            replaced = {row.subject_id for row in before}
            replaced_query.update(variant=variant, cohort=cohort, created_at=now, reason=reason, change_xid=None)
            after = [
                row._replace(variant_pk=variant.pk, cohort=cohort, created_at=now, source=Assignment.Source.FORCED)
                for row in before
            ]
            replacements_record(experiment=experiment, before=before, after=after)
        inserted = assignments_insert_rows(
            experiment_pk=experiment.pk,
            cohort=cohort,
            rows=[(subject_id, variant.pk, now) for subject_id in subjects if subject_id not in replaced],
            source=Assignment.Source.FORCED,
            reason=reason,
        )
        kept = list(
            Assignment.objects.filter(experiment=experiment, subject_id__in=set(subjects) - replaced - inserted)
            .order_by("subject_id")
            .values_list("subject_id", "variant__key", "source")
        )
    return ForceResult(
        forced=sorted(replaced | inserted),
        kept=[KeptAssignment(subject_id=s, variant_id=v, source=source) for s, v, source in kept],
    )
