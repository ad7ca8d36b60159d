"""Following links: which assigned identifier, if any, a new subject's variant is carried over from.

Free of Django, like hashing.py: the walk's statement (storage.assignments_link_graph)
reads the neighbourhood of a whole batch once, and each subject's own walk through
it is done here, in memory, so a hundred new subjects around one busy identifier cost
the database one read of its links. The same walk, bounds included, resolves one
identifier to those linked to it for the staff pages (subjects.identifiers_connected).

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

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime

# How far from a new subject, and through how many identifiers, to look for one already assigned.
MAX_DEPTH = 4
MAX_IDENTIFIERS = 1000
# Links read per identifier and side: one identifier with a million links costs a bounded read.
FANOUT = MAX_IDENTIFIERS
# A request's whole share of the link graph. Measured on PostgreSQL (docs/explanation/following-links.md),
# 180,000 rows took the statement 0.6 s and this module 0.2 s, and a neighbour visit 0.3 µs:
# at these bounds the in-memory part stays well under a second, whatever the links.
MAX_LINK_ROWS = 200_000
MAX_VISITS = 500_000

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
    # False when the statement had more than MAX_LINK_ROWS rows to give: the graph is then empty.
    complete: bool = True

    def capped(self) -> set[Node]:
        """The identifiers whose links were read up to FANOUT on one side: more may be unread.

        Each link row is (the identifier whose links were read, the other end), and a link is
        stored with its smaller end on side a. SQLite reads every link, so there an identifier
        with FANOUT links or more on one side counts too.
        """
        sides = Counter((first, first < second) for first, second in self.links)
        return {node for (node, _), count in sides.items() if count >= FANOUT}


@dataclass(frozen=True)
class Carried:
    """What following links decided for a batch's new subjects."""

    # (experiment pk, subject ID) -> the variant pk carried over from a linked identifier.
    variants: dict[tuple[int, str], int]
    # The (experiment pk, subject ID) pairs whose walk a bound of the request's work stopped.
    bounded: frozenset[tuple[int, str]]


def walk_params(asked: Sequence[Asked]) -> dict:
    """The parameters of the walk's statement (storage.assignments_link_graph) for these subjects."""
    return graph_params(
        starts={(type_pk, subject_id) for _, type_pk, subject_id in asked},
        following={(pk, type_pk) for pk, type_pk, _ in asked},
        depth=MAX_DEPTH,
    )


def graph_params(*, starts: Iterable[Node], following: Iterable[tuple[int, int]], depth: int) -> dict:
    """The parameters of the walk's statement: links within `depth` links of the starts, and the
    assignments there in the (experiment pk, subject type pk) pairs `following` names."""
    return {
        "starts": json.dumps(sorted(starts)),
        "following": json.dumps(sorted(following)),
        "depth": depth,
        "fanout": FANOUT,
        # One more than the bound, so a graph exactly at the bound is told from one past it.
        "rows": MAX_LINK_ROWS + 1,
    }


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


class Budget:
    """Neighbour visits left to the walks of one request."""

    def __init__(self, visits: float = MAX_VISITS) -> None:
        self.visits = visits

    def spend(self, visits: int) -> bool:
        """Take `visits` if that many are left; False, taking none, if not."""
        if visits > self.visits:
            return False
        self.visits -= visits
        return True


@dataclass(frozen=True)
class Walk:
    # The identifiers visited, in the order of the rule, and how many links from the start each is.
    order: list[Node]
    distances: list[int]
    # True when the walk reached every identifier of its component, all within half of
    # MAX_DEPTH links and fewer than MAX_IDENTIFIERS of them: any two are then within
    # MAX_DEPTH links of each other, so a walk from any of them visits all the others.
    whole_component: bool
    # True when a bound stopped the walk while identifiers may be left unvisited; exact when
    # the walk was asked to look past where it stopped, else True wherever it might be.
    truncated: bool


def neighbours_of(links: Iterable[tuple[Node, Node]]) -> dict[Node, set[Node]]:
    """Each identifier's neighbours, through the links both ways."""
    neighbours: dict[Node, set[Node]] = defaultdict(set)
    for first, second in links:
        neighbours[first].add(second)
        neighbours[second].add(first)
    return neighbours


def walk_from(
    start: Node,
    neighbours: dict[Node, set[Node]],
    budget: Budget,
    *,
    depth: int = MAX_DEPTH,
    exact: bool = False,
    capped: AbstractSet[Node] = frozenset(),
) -> Walk | None:
    """The walk from `start` by the rule, at most `depth` (up to MAX_DEPTH) links away; None if
    the budget ran out before it ended.

    With `exact`, a walk that a bound stopped looks one level further to tell whether anything
    was left unvisited (`neighbours` must then hold the links out of the identifiers `depth`
    links away too), and one that looked at the links of a `capped` identifier (LinkGraph.capped)
    is truncated. The hot path does not ask (what lies past the bounds never counts there), so
    its visits are those of the rule alone.
    """
    seen = {start}
    order: list[Node] = []
    distances: list[int] = []
    frontier = [start]
    for distance in range(depth):
        found: set[Node] = set()
        for current in frontier:
            near = neighbours.get(current, ())
            if not budget.spend(len(near)):
                return None
            found.update(near)
        level = sorted(found - seen)
        if not level:
            # Nothing is farther than `distance` links from the start.
            truncated = bool(capped) and not capped.isdisjoint(seen)
            return Walk(order, distances, whole_component=distance <= MAX_DEPTH // 2, truncated=truncated)
        order.extend(level)
        distances.extend([distance + 1] * len(level))
        if len(order) > MAX_IDENTIFIERS:
            # Farther identifiers come after every one of these, past the bound.
            return Walk(order[:MAX_IDENTIFIERS], distances[:MAX_IDENTIFIERS], whole_component=False, truncated=True)
        seen.update(level)
        frontier = level
        if len(order) == MAX_IDENTIFIERS:
            break
    if not exact:
        return Walk(order, distances, whole_component=False, truncated=True)
    beyond = not capped.isdisjoint(seen)
    for current in frontier:
        if beyond:
            break
        near = neighbours.get(current, ())
        if not budget.spend(len(near)):
            return None
        beyond = not near <= seen
    return Walk(order, distances, whole_component=False, truncated=beyond)


def visited(start: Node, neighbours: dict[Node, set[Node]]) -> list[Node]:
    """The identifiers a walk from `start` visits, in the order of the rule, with no bound on the work."""
    walk = walk_from(start, neighbours, Budget(visits=float("inf")))
    assert walk is not None
    return walk.order


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
