"""Everything stored about one subject, for the staff console's subject lookup: the identifiers linked to
it (idlinks/selectors.py), its assignments and holdout memberships, and theirs.

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


@dataclass(frozen=True)
class LinkedSubject:
    identifier: ConnectedIdentifier
    assignments: list[Assignment]
    memberships: list[Assignment]


@dataclass(frozen=True)
class SubjectLookup:
    subject_type: SubjectType
    subject_id: str
    # Its assignments in experiments.
    assignments: list[Assignment]
    # Its memberships of holdouts: stored as assignments, but no experiment's.
    memberships: list[Assignment]
    linked: list[LinkedSubject]
    # True when a bound stopped the walk of the links: `linked` is then a subset.
    truncated: bool


def assignments_of(identifiers: list[tuple[SubjectType, str]]) -> list[Assignment]:
    """The assignments of these identifiers in every experiment and holdout of their subject types, in one
    query."""
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


def _split(assignments: list[Assignment]) -> tuple[list[Assignment], list[Assignment]]:
    """Assignments in experiments, and memberships of holdouts."""
    experiments = [a for a in assignments if a.experiment.kind == Experiment.Kind.EXPERIMENT]
    return experiments, [a for a in assignments if a.experiment.kind == Experiment.Kind.HOLDOUT]


def subject_lookup(*, subject_type: SubjectType, subject_id: str, depth: int) -> SubjectLookup:
    """The subject's assignments and holdout memberships, and each identifier linked to it within `depth`
    links with theirs.

    Costs identifiers_connected, the subject types when anything is linked, and two
    queries (the experiments of those types, then their assignments) for the subject and
    all its linked identifiers together.
    """
    connected = identifiers_connected(subject_type_pk=subject_type.pk, subject_id=subject_id, depth=depth)
    types = {subject_type.key: subject_type}
    if connected.identifiers:
        types.update((t.key, t) for t in SubjectType.objects.all())
    wanted = [(subject_type, subject_id)] + [(types[i.subject_type], i.subject_id) for i in connected.identifiers]
    by_identifier: dict[tuple[int, str], list[Assignment]] = defaultdict(list)
    for assignment in assignments_of(wanted):
        by_identifier[(assignment.experiment.subject_type_id, assignment.subject_id)].append(assignment)
    assignments, memberships = _split(by_identifier[(subject_type.pk, subject_id)])
    return SubjectLookup(
        subject_type=subject_type,
        subject_id=subject_id,
        assignments=assignments,
        memberships=memberships,
        linked=[
            LinkedSubject(
                identifier, *_split(by_identifier[(types[identifier.subject_type].pk, identifier.subject_id)])
            )
            for identifier in connected.identifiers
        ],
        truncated=connected.truncated,
    )
