"""Following links: which assigned identifier, if any, a new subject's variant is carried over from.

Free of Django, like hashing.py: the walk's statement (storage.assignments_link_graph, composed
of the link walk idlinks/storage.py hands over) reads the neighbourhood of a whole batch once, and
each subject's own walk through it is idlinks/walk.py's, in memory, so a hundred new subjects around
one busy identifier cost the database one read of its links.

The rule: from the new subject, breadth first through the links both ways, at most
MAX_DEPTH links away; the identifiers reached, in order of distance, then subject
type (by primary key, the order they were created in) and subject ID (by code point),
are visited up to MAX_IDENTIFIERS (the subject itself not counted). Of those of the
experiment's subject type that have an assignment in it, the earliest (ties: the
smaller subject ID) gives its variant.

The work is bounded, not only the result, because clients build the graph (POST
/id-link): the statement returns at most MAX_LINK_ROWS rows, and the walks of one
request make at most MAX_VISITS neighbour visits between them. A subject whose walk a
bound stops gets the formula instead (its pair is in `Carried.bounded`, which the
caller counts). And a component whose identifiers are all within MAX_DEPTH links of
each other, and no more than the identifier bound, is walked once, not once per new
subject in it: every walk from inside it would visit the same identifiers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from idlinks.walk import MAX_LINK_ROWS, Budget, Node, neighbours_of, walk_from

# (experiment pk, subject type pk, subject ID): a new subject of an experiment that follows links.
Asked = tuple[int, int, str]


@dataclass(frozen=True)
class LinkGraph:
    """Links around a batch's new subjects, and what the identifiers there have stored."""

    links: list[tuple[Node, Node]]
    # (experiment pk, identifier) -> (created at, variant pk)
    assignments: dict[tuple[int, Node], tuple[datetime, int]]
    # False when the statement had more than MAX_LINK_ROWS rows to give: the graph is then empty.
    complete: bool = True


@dataclass(frozen=True)
class Carried:
    """What following links decided for a batch's new subjects."""

    # (experiment pk, subject ID) -> the variant pk carried over from a linked identifier.
    variants: dict[tuple[int, str], int]
    # The (experiment pk, subject ID) pairs whose walk a bound of the request's work stopped.
    bounded: frozenset[tuple[int, str]]


def link_graph(rows: Iterable[tuple]) -> LinkGraph:
    """The walk's rows as a LinkGraph: a link (identifier, identifier, NULLs) or an assignment
    (identifier, NULLs, experiment pk, variant pk, created at). More than MAX_LINK_ROWS rows
    give an incomplete, empty graph."""
    graph = LinkGraph(links=[], assignments={})
    for count, (type_pk, subject_id, other_type_pk, other_id, experiment_pk, variant_pk, created_at) in enumerate(
        rows, 1
    ):
        if count > MAX_LINK_ROWS:
            return LinkGraph(links=[], assignments={}, complete=False)
        if experiment_pk is None:
            graph.links.append(((type_pk, subject_id), (other_type_pk, other_id)))
        else:
            graph.assignments[(experiment_pk, (type_pk, subject_id))] = (created_at, variant_pk)
    return graph


def linked_first(asked: Sequence[Asked], graph: LinkGraph) -> Carried:
    """For each asked (experiment pk, subject type pk, subject ID), the variant pk of the first
    assigned identifier of that type that its walk visits, where there is one, and the pairs
    whose walk a bound stopped."""
    if not graph.complete:
        return Carried(variants={}, bounded=frozenset((pk, subject_id) for pk, _, subject_id in asked))
    if not graph.assignments:
        return Carried(variants={}, bounded=frozenset())
    neighbours = neighbours_of(graph.links)
    budget = Budget()
    # Each start's walk, or its component's (its own identifiers included: it has no
    # assignment in an experiment that asks for it); None where the budget ran out.
    walks: dict[Node, list[Node] | None] = {}
    # The variant pk each walk, or component, gives each experiment: by id() of its list of nodes.
    found: dict[tuple[int, int], int | None] = {}
    variants = {}
    bounded = set()
    for experiment_pk, type_pk, subject_id in sorted(asked):
        start = (type_pk, subject_id)
        if start not in neighbours:
            # Most new subjects have no link at all.
            continue
        if start not in walks:
            walk = walk_from(start, neighbours, budget)
            if walk is None:
                walks[start] = None
            elif walk.whole_component:
                component = [start, *walk.order]
                walks.update(dict.fromkeys(component, component))
            else:
                walks[start] = walk.order
        nodes = walks[start]
        if nodes is None:
            bounded.add((experiment_pk, subject_id))
            continue
        key = (id(nodes), experiment_pk)
        if key not in found:
            candidates = _assigned(graph, experiment_pk, (node for node in nodes if node[0] == type_pk))
            found[key] = min(candidates)[1] if candidates else None
        if found[key] is not None:
            variants[(experiment_pk, subject_id)] = found[key]
    return Carried(variants=variants, bounded=frozenset(bounded))


def _assigned(graph: LinkGraph, experiment_pk: int, nodes: Iterable[Node]) -> list[tuple[tuple[datetime, str], int]]:
    """((created at, subject ID), variant pk) of each of the nodes assigned in the experiment."""
    candidates = []
    for node in nodes:
        stored = graph.assignments.get((experiment_pk, node))
        if stored is not None:
            created_at, variant_pk = stored
            candidates.append(((created_at, node[1]), variant_pk))
    return candidates
