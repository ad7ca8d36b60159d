"""Everything stored about one subject: the identifiers linked to it, its assignments and holdout
memberships, and theirs.

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

from assignments.linking import MAX_DEPTH, Budget, neighbours_of, walk_from
from assignments.models import Assignment, Experiment, SubjectType
from assignments.storage import identifier_link_graph


@dataclass(frozen=True)
class ConnectedIdentifier:
    subject_type: str
    subject_id: str
    # Links between it and the identifier the walk started from, by the shortest path.
    distance: int


@dataclass(frozen=True)
class ConnectedIdentifiers:
    """The identifiers linked, directly or through others, to one identifier.

    `identifiers` excludes the start and is in the order of the walk of following links
    (assignments/linking.py): distance, then subject type, then subject ID. `truncated` is
    True when a bound stopped the walk while identifiers may have remained unvisited: the
    list is then a subset.
    """

    identifiers: tuple[ConnectedIdentifier, ...]
    truncated: bool


def identifiers_connected(
    *, subject_type: SubjectType, subject_id: str, depth: int = MAX_DEPTH
) -> ConnectedIdentifiers:
    """Every identifier connected to (subject_type, subject_id) by links, across subject types,
    within `depth` links (1 to MAX_DEPTH): the walk of following links, its bounds included.

    Links through archived subject types are followed, since they still join recorded data.
    The links are read one level past `depth`, so that `truncated` is exact at the depth bound
    and at MAX_IDENTIFIERS; it is also True when an identifier's links were read only up to
    FANOUT, and past MAX_LINK_ROWS the walk does not start: the result is empty and truncated.
    Costs one statement (on Citus one per level), and one more for the subject types when
    anything is linked.
    """
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be from 1 to {MAX_DEPTH}")
    start = (subject_type.pk, subject_id)
    graph = identifier_link_graph(start=start, depth=depth + 1)
    if not graph.complete:
        return ConnectedIdentifiers(identifiers=(), truncated=True)
    neighbours = neighbours_of(graph.links)
    if start not in neighbours:
        return ConnectedIdentifiers(identifiers=(), truncated=False)
    walk = walk_from(start, neighbours, Budget(), depth=depth, exact=True, capped=graph.capped())
    if walk is None:
        return ConnectedIdentifiers(identifiers=(), truncated=True)
    keys = dict(SubjectType.objects.values_list("pk", "key"))
    return ConnectedIdentifiers(
        identifiers=tuple(
            ConnectedIdentifier(subject_type=keys[type_pk], subject_id=linked_id, distance=distance)
            for (type_pk, linked_id), distance in zip(walk.order, walk.distances, strict=True)
        ),
        truncated=walk.truncated,
    )


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
    connected = identifiers_connected(subject_type=subject_type, subject_id=subject_id, depth=depth)
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
