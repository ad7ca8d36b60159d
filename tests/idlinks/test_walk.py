"""idlinks/walk.py: the bounded walk of the link graph in memory, its order, its distances and where it says
it was truncated."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from idlinks.walk import FANOUT, MAX_DEPTH, MAX_IDENTIFIERS, Budget, Links, visited, walk_from
from tests.helpers.link_graphs import COOKIE, DEVICE, NODES, USER


def neighbours(*links):
    graph: dict = {}
    for first, second in links:
        graph.setdefault(first, set()).add(second)
        graph.setdefault(second, set()).add(first)
    return graph


def test_visited__order_is_distance_then_subject_type_then_id_and_never_the_start():
    start = (COOKIE, "c-0")
    graph = neighbours(
        (start, (USER, "u-b")),
        (start, (USER, "u-a")),
        (start, (COOKIE, "c-z")),
        ((USER, "u-a"), (DEVICE, "d-1")),
        ((USER, "u-a"), (COOKIE, "c-1")),
        ((USER, "u-a"), start),
    )

    assert visited(start, graph) == [(COOKIE, "c-z"), (USER, "u-a"), (USER, "u-b"), (COOKIE, "c-1"), (DEVICE, "d-1")]


def test_visited__subject_ids_ordered_by_code_point():
    start = (USER, "u")
    graph = neighbours((start, (COOKIE, "b")), (start, (COOKIE, "B")), (start, (COOKIE, "é")), (start, (COOKIE, "a")))

    assert [subject_id for _, subject_id in visited(start, graph)] == ["B", "a", "b", "é"]


def test_visited__a_level_past_the_bound__cut_at_the_bound_and_no_farther():
    start = (COOKIE, "new")
    users = [(USER, f"u-{n:04d}") for n in range(MAX_IDENTIFIERS + 5)]
    graph = neighbours(*[(start, user) for user in users], (users[0], (COOKIE, "beyond")))

    assert visited(start, graph) == users[:MAX_IDENTIFIERS]


def reference_distances(start, links) -> dict:
    """How many links from `start` each identifier of its component is, written independently."""
    distances, frontier = {start: 0}, [start]
    while frontier:
        following = []
        for current in frontier:
            for first, second in links:
                for node, other in ((first, second), (second, first)):
                    if node == current and other not in distances:
                        distances[other] = distances[current] + 1
                        following.append(other)
        frontier = following
    return distances


@given(
    links=st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)).filter(lambda link: link[0] != link[1])),
    depth=st.integers(1, MAX_DEPTH),
)
def test_walk_from__exact__the_rules_order_with_distances_and_truncated_only_if_more_lie_farther(links, depth):
    # Given any small graph, walked from one identifier to a depth, looking past where it stops
    start = NODES[0]
    distances = reference_distances(start, links)

    # When
    walk = walk_from(start, neighbours(*links), Budget(), depth=depth, exact=True)

    # Then it visits what lies within the depth, by distance then identifier, each with its
    # distance, and is truncated exactly when something lies farther
    within = sorted((distance, node) for node, distance in distances.items() if 0 < distance <= depth)
    assert list(zip(walk.distances, walk.order, strict=True)) == within
    assert walk.truncated is any(distance > depth for distance in distances.values())


def test_walk_from__not_exact__the_hot_paths_walk_says_truncated_wherever_it_might_be():
    start = (COOKIE, "c-0")
    graph = neighbours((start, (USER, "u")))

    assert walk_from(start, graph, Budget(), depth=1).truncated is True
    assert walk_from(start, graph, Budget(), depth=2).truncated is False


def test_links_capped__fanout_links_read_on_one_side__that_identifier_only():
    # Given rows as the statement returns them: the identifier whose links were read, then the other end
    hub, small = (USER, "hub"), (USER, "a")
    full_side = [(hub, (COOKIE, f"c{n:04d}")) for n in range(FANOUT)]
    other_side = [(hub, (COOKIE, f"c{n:04d}")) for n in range(FANOUT - 1)]
    both_sides_below = [(small, (COOKIE, f"c{n:04d}")) for n in range(FANOUT - 1)] + [(small, (USER, "z"))]

    assert Links(links=full_side).capped() == {hub}
    assert Links(links=other_side + both_sides_below).capped() == set()


def test_walk_from__exact__a_capped_identifier_expanded__truncated():
    start, hub = (COOKIE, "c-0"), (USER, "hub")
    graph = neighbours((start, hub))

    assert walk_from(start, graph, Budget(), depth=2, exact=True, capped={hub}).truncated is True
    assert walk_from(start, graph, Budget(), depth=2, exact=True, capped={(USER, "other")}).truncated is False
