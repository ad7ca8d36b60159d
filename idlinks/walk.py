"""The bounded walk of the link graph, in memory: breadth first through the links both ways, from one
identifier, in the order of the rule of docs/explanation/following-links.md, with every bound that keeps a
request's work finite whatever links clients build (POST /id-link).

Free of Django: the links come from one read (idlinks/storage.py), and the walks of a
whole batch share it. Assignments follow links through it (assignments/linking.py); the
staff pages list what an identifier is connected to (idlinks/selectors.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

# How far from its start a walk goes, and through how many identifiers.
MAX_DEPTH = 4
MAX_IDENTIFIERS = 1000
# Links read per identifier and side: one identifier with a million links costs a bounded read.
FANOUT = MAX_IDENTIFIERS
# A request's whole share of the link graph. Measured on PostgreSQL (bench/results/summary.md),
# 180,000 rows took the statement 0.6 s and the walk 0.2 s, and a neighbour visit 0.3 µs:
# at these bounds the in-memory part stays well under a second, whatever the links.
MAX_LINK_ROWS = 200_000
MAX_VISITS = 500_000

# (subject type pk, subject ID)
Node = tuple[int, str]


@dataclass(frozen=True)
class Links:
    """The links a read found around some identifiers: each (the identifier whose links were read, the other end)."""

    links: list[tuple[Node, Node]]
    # False when the read had more than MAX_LINK_ROWS rows to give: the links are then empty.
    complete: bool = True

    def capped(self) -> set[Node]:
        """The identifiers whose links were read up to FANOUT on one side: more may be unread.

        Each link row is (the identifier whose links were read, the other end), and a link is
        stored with its smaller end on side a. SQLite reads every link, so there an identifier
        with FANOUT links or more on one side counts too.
        """
        sides = Counter((first, first < second) for first, second in self.links)
        return {node for (node, _), count in sides.items() if count >= FANOUT}


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
