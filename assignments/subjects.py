"""Everything stored about one subject: its assignments and those of the identifiers linked to it.

Assignments carry no subject type of their own (their experiment has one), and no
index leads with subject_id, so every read here names the experiments of the
subject type explicitly: `experiment_id IN (...) AND subject_id IN (...)` is
answered by probes of assignment_experiment_subject_unique however many million
rows the table has.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Q

from assignments.models import Assignment, Experiment, SubjectType
from idlinks.selectors import ConnectedIdentifier, identifiers_connected

LOOKUP_MAX_DEPTH = 4
LOOKUP_MAX_IDENTIFIERS = 200


@dataclass(frozen=True)
class LinkedSubject:
    identifier: ConnectedIdentifier
    assignments: list[Assignment]


@dataclass(frozen=True)
class SubjectLookup:
    subject_type: SubjectType
    subject_id: str
    assignments: list[Assignment]
    linked: list[LinkedSubject]
    # True when a bound stopped the walk of the links: `linked` is then a subset.
    truncated: bool


def assignments_of(identifiers: list[tuple[SubjectType, str]]) -> list[Assignment]:
    """The assignments of these identifiers in every experiment of their subject types, in one query."""
    ids_by_type: dict[int, list[str]] = defaultdict(list)
    for subject_type, subject_id in identifiers:
        ids_by_type[subject_type.pk].append(subject_id)
    experiments_by_type: dict[int, list[int]] = defaultdict(list)
    for pk, type_pk in Experiment.objects.filter(subject_type__in=ids_by_type).values_list("pk", "subject_type"):
        experiments_by_type[type_pk].append(pk)
    condition = Q()
    for type_pk, subject_ids in ids_by_type.items():
        if experiments_by_type[type_pk]:
            condition |= Q(experiment__in=experiments_by_type[type_pk], subject_id__in=subject_ids)
    if not condition:
        return []
    return list(
        Assignment.objects.filter(condition)
        .select_related("experiment", "variant")
        .order_by("subject_id", "experiment__key", "pk")
    )


def subject_lookup(*, subject_type: SubjectType, subject_id: str, depth: int) -> SubjectLookup:
    """The subject's assignments, and each identifier linked to it within `depth` links with theirs.

    Costs the link walk (one query per level, idlinks.selectors), the subject types
    when anything is linked, and two queries (the experiments of those types, then
    their assignments) for the subject and all its linked identifiers together.
    """
    connected = identifiers_connected(
        subject_type=subject_type.key,
        subject_id=subject_id,
        max_depth=depth,
        max_identifiers=LOOKUP_MAX_IDENTIFIERS,
    )
    types = {subject_type.key: subject_type}
    if connected.identifiers:
        types.update((t.key, t) for t in SubjectType.objects.all())
    wanted = [(subject_type, subject_id)] + [(types[i.subject_type], i.subject_id) for i in connected.identifiers]
    by_identifier: dict[tuple[int, str], list[Assignment]] = defaultdict(list)
    for assignment in assignments_of(wanted):
        by_identifier[(assignment.experiment.subject_type_id, assignment.subject_id)].append(assignment)
    return SubjectLookup(
        subject_type=subject_type,
        subject_id=subject_id,
        assignments=by_identifier[(subject_type.pk, subject_id)],
        linked=[
            LinkedSubject(identifier=i, assignments=by_identifier[(types[i.subject_type].pk, i.subject_id)])
            for i in connected.identifiers
        ],
        truncated=connected.truncated,
    )
