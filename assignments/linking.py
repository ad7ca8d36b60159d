"""Following links: which assigned identifier, if any, a new subject's variant is carried over from.

Free of Django, like hashing.py: the walk's statement (storage.assignments_link_graph)
reads the neighbourhood of a whole batch once, and each subject's own walk through
it is done here, in memory, so a hundred new subjects around one busy identifier cost
the database one read of its links.

The rule: from the new subject, breadth first through the links both ways, at most
MAX_DEPTH links away; the identifiers reached, in order of distance, then subject
type (by primary key, the order they were created in) and subject ID (by code point),
are visited up to MAX_IDENTIFIERS (the subject itself not counted). Of those of the
experiment's subject type that have an assignment in it, the earliest (ties: the
smaller subject ID) gives its variant.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

# How far from a new subject, and through how many identifiers, to look for one already assigned.
MAX_DEPTH = 4
MAX_IDENTIFIERS = 1000
# Links read per identifier and side: one identifier with a million links costs a bounded read.
FANOUT = MAX_IDENTIFIERS

# (subject type pk, subject ID)
Node = tuple[int, str]
# (experiment pk, subject type pk, subject ID): a new subject of an experiment that follows links.
Asked = tuple[int, int, str]


@dataclass(frozen=True)
class LinkGraph:
    """Links around a batch's new subjects, and what the identifiers there have stored."""

    links: list[tuple[Node, Node]]
    # (experiment pk, identifier) -> (created at, variant pk)
    assignments: dict[tuple[int, Node], tuple[datetime, int]]


def walk_params(asked: Sequence[Asked]) -> dict:
    """The parameters of the walk's statement (storage.assignments_link_graph) for these subjects."""
    return {
        "starts": json.dumps(sorted({(type_pk, subject_id) for _, type_pk, subject_id in asked})),
        "following": json.dumps(sorted({(pk, type_pk) for pk, type_pk, _ in asked})),
        "depth": MAX_DEPTH,
        "fanout": FANOUT,
    }


def link_graph(rows: Iterable[tuple]) -> LinkGraph:
    """The walk's rows as a LinkGraph: a link (identifier, identifier, NULLs) or an assignment
    (identifier, NULLs, experiment pk, variant pk, created at)."""
    graph = LinkGraph(links=[], assignments={})
    for type_pk, subject_id, other_type_pk, other_id, experiment_pk, variant_pk, created_at in rows:
        if experiment_pk is None:
            graph.links.append(((type_pk, subject_id), (other_type_pk, other_id)))
        else:
            graph.assignments[(experiment_pk, (type_pk, subject_id))] = (created_at, variant_pk)
    return graph


def visited(start: Node, neighbours: dict[Node, set[Node]]) -> list[Node]:
    """The identifiers a walk from `start` visits, in the order of the rule."""
    seen = {start}
    order: list[Node] = []
    frontier = [start]
    for _ in range(MAX_DEPTH):
        level = sorted({node for current in frontier for node in neighbours.get(current, ())} - seen)
        if not level:
            break
        order.extend(level)
        if len(order) >= MAX_IDENTIFIERS:
            # Farther identifiers come after every one of these, past the bound.
            return order[:MAX_IDENTIFIERS]
        seen.update(level)
        frontier = level
    return order


def linked_first(asked: Sequence[Asked], graph: LinkGraph) -> dict[tuple[int, str], int]:
    """For each asked (experiment pk, subject type pk, subject ID), the variant pk of the first
    assigned identifier of that type that its walk visits, where there is one."""
    if not graph.assignments:
        return {}
    neighbours: dict[Node, set[Node]] = defaultdict(set)
    for first, second in graph.links:
        neighbours[first].add(second)
        neighbours[second].add(first)
    walks: dict[Node, list[Node]] = {}
    found = {}
    for experiment_pk, type_pk, subject_id in asked:
        start = (type_pk, subject_id)
        if start not in neighbours:
            # Most new subjects have no link at all.
            continue
        if start not in walks:
            walks[start] = visited(start, neighbours)
        candidates = _assigned(graph, experiment_pk, (node for node in walks[start] if node[0] == type_pk))
        if candidates:
            (_, _), variant_pk = min(candidates)
            found[(experiment_pk, subject_id)] = variant_pk
    return found


def _assigned(graph: LinkGraph, experiment_pk: int, nodes: Iterable[Node]) -> list[tuple[tuple[datetime, str], int]]:
    """((created at, subject ID), variant pk) of each of the nodes assigned in the experiment."""
    candidates = []
    for node in nodes:
        stored = graph.assignments.get((experiment_pk, node))
        if stored is not None:
            created_at, variant_pk = stored
            candidates.append(((created_at, node[1]), variant_pk))
    return candidates
