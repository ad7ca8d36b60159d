"""assignments/linking.py: each new subject's walk through a batch's neighbourhood, in memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from assignments.linking import (
    FANOUT,
    MAX_DEPTH,
    MAX_IDENTIFIERS,
    MAX_LINK_ROWS,
    MAX_VISITS,
    Budget,
    Carried,
    LinkGraph,
    link_graph,
    linked_first,
    visited,
    walk_from,
)

COOKIE, USER, DEVICE = 1, 2, 3
EARLY, LATE = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)


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


def test_linked_first__earliest_then_smaller_id__per_experiment_and_subject_type():
    start = (COOKIE, "new")
    graph = LinkGraph(
        links=[(start, (USER, "u")), ((USER, "u"), (COOKIE, "c-b")), ((USER, "u"), (COOKIE, "c-a"))],
        assignments={
            (7, (COOKIE, "c-b")): (EARLY, 71),
            (7, (COOKIE, "c-a")): (EARLY, 72),
            (8, (COOKIE, "c-b")): (LATE, 81),
            (8, (COOKIE, "c-a")): (EARLY, 82),
            # A user's row in a cookie experiment never counts: only the experiment's subject type does.
            (9, (USER, "u")): (EARLY, 91),
        },
    )

    assert linked_first([(7, COOKIE, "new"), (8, COOKIE, "new"), (9, COOKIE, "new")], graph) == Carried(
        variants={(7, "new"): 72, (8, "new"): 82}, bounded=frozenset()
    )


def reference_walk(start, links) -> list:
    """The rule's walk, written independently: breadth first, each level sorted, the first MAX_IDENTIFIERS."""
    near: dict = {}
    for first, second in links:
        near.setdefault(first, set()).add(second)
        near.setdefault(second, set()).add(first)
    seen, order, frontier = {start}, [], [start]
    for _ in range(MAX_DEPTH):
        frontier = sorted({node for current in frontier for node in near.get(current, ())} - seen)
        seen.update(frontier)
        order.extend(frontier)
    return order[:MAX_IDENTIFIERS]


def reference_linked(asked, graph: LinkGraph) -> dict:
    found = {}
    for experiment_pk, type_pk, subject_id in asked:
        candidates = [
            (graph.assignments[(experiment_pk, node)][0], node[1], graph.assignments[(experiment_pk, node)][1])
            for node in reference_walk((type_pk, subject_id), graph.links)
            if node[0] == type_pk and (experiment_pk, node) in graph.assignments
        ]
        if candidates:
            found[(experiment_pk, subject_id)] = min(candidates)[2]
    return found


NODES = [(COOKIE, f"c{n}") for n in range(8)] + [(USER, f"u{n}") for n in range(4)]


@given(
    links=st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)).filter(lambda link: link[0] != link[1])),
    assigned=st.dictionaries(
        st.tuples(st.sampled_from([7, 8]), st.sampled_from(NODES)),
        st.tuples(st.integers(0, 3).map(lambda days: EARLY + timedelta(days=days)), st.integers(1, 4)),
    ),
    asked_nodes=st.lists(st.tuples(st.sampled_from([7, 8]), st.sampled_from(NODES[:8])), min_size=1),
)
def test_linked_first__any_small_graph__the_rule_walked_from_each_subject(links, assigned, asked_nodes):
    # Given any graph, assignments in two cookie experiments, and new cookies of either (the walks of a
    # component whose identifiers are all near each other shared, the others walked one by one)
    graph = LinkGraph(links=links, assignments=assigned)
    asked = [(pk, node[0], node[1]) for pk, node in asked_nodes if (pk, node) not in assigned]

    # When following links, Then each subject gets what its own walk by the rule finds, and no bound is hit
    assert linked_first(asked, graph) == Carried(variants=reference_linked(asked, graph), bounded=frozenset())


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


def test_link_graph_capped__fanout_links_read_on_one_side__that_identifier_only():
    # Given rows as the statement returns them: the identifier whose links were read, then the other end
    hub, small = (USER, "hub"), (USER, "a")
    full_side = [(hub, (COOKIE, f"c{n:04d}")) for n in range(FANOUT)]
    other_side = [(hub, (COOKIE, f"c{n:04d}")) for n in range(FANOUT - 1)]
    both_sides_below = [(small, (COOKIE, f"c{n:04d}")) for n in range(FANOUT - 1)] + [(small, (USER, "z"))]

    assert LinkGraph(links=full_side, assignments={}).capped() == {hub}
    assert LinkGraph(links=other_side + both_sides_below, assignments={}).capped() == set()


def test_walk_from__exact__a_capped_identifier_expanded__truncated():
    start, hub = (COOKIE, "c-0"), (USER, "hub")
    graph = neighbours((start, hub))

    assert walk_from(start, graph, Budget(), depth=2, exact=True, capped={hub}).truncated is True
    assert walk_from(start, graph, Budget(), depth=2, exact=True, capped={(USER, "other")}).truncated is False


def bipartite(side: int) -> list:
    """Every one of `side` cookies linked to every one of `side` others: a component that a client of
    POST /id-link can build, every identifier within 2 links of every other."""
    return [((COOKIE, f"a{i:04d}"), (COOKIE, f"b{j:04d}")) for i in range(side) for j in range(side)]


def test_linked_first__599_new_subjects_in_a_300_by_300_component__walked_once_and_all_carried_over():
    # Given a component of 90,000 links whose one assigned cookie is a0000: walking it from each of the
    # 599 others would take 599 times 180,000 neighbour visits, far past MAX_VISITS
    links = bipartite(300)
    graph = LinkGraph(links=links, assignments={(7, (COOKIE, "a0000")): (EARLY, 71)})
    asked = [(7, COOKIE, subject_id) for _, subject_id in sorted({node for link in links for node in link})[1:]]
    assert len(asked) == 599 and 599 * 2 * len(links) > MAX_VISITS

    # When following links
    carried = linked_first(asked, graph)

    # Then the component is walked once: every subject gets the assigned cookie's variant, none is bounded
    assert carried == Carried(variants={(7, subject_id): 71 for _, _, subject_id in asked}, bounded=frozenset())


def test_linked_first__walks_past_the_visit_budget__the_rest_bounded_and_left_to_the_formula():
    # Given 40 new cookies, each 2 links from one side of a 300 by 300 component (so more than 4 links
    # from some of it, and walked one by one), whose walks cost about 90,000 neighbour visits each
    links = bipartite(300)
    tails = [((COOKIE, f"new{n:02d}"), (USER, f"u{n:02d}")) for n in range(40)]
    tails += [((USER, f"u{n:02d}"), (COOKIE, f"a{n:04d}")) for n in range(40)]
    graph = LinkGraph(links=links + tails, assignments={(7, (COOKIE, "b0000")): (EARLY, 71)})
    asked = [(7, COOKIE, f"new{n:02d}") for n in range(40)]

    # When following links
    carried = linked_first(asked, graph)

    # Then the first walks, in subject ID order, carry the variant over, until MAX_VISITS is spent;
    # every later subject is bounded (its variant left to the formula), none is both
    walked = MAX_VISITS // (1 + 2 + 301 + 300 * 300)
    assert sorted(carried.variants) == [(7, f"new{n:02d}") for n in range(walked)]
    assert sorted(carried.bounded) == [(7, f"new{n:02d}") for n in range(walked, 40)]


def test_link_graph__more_rows_than_the_bound__incomplete_and_every_subject_bounded():
    # Given the walk's statement returned one row past MAX_LINK_ROWS (it is asked for one more than that)
    rows = (((COOKIE, f"c{n}")[0], f"c{n}", USER, "hub", None, None, None) for n in range(MAX_LINK_ROWS + 1))

    # When the rows are read
    graph = link_graph(rows)

    # Then the graph is incomplete and empty, and following links leaves every subject to the formula
    assert graph == LinkGraph(links=[], assignments={}, complete=False)
    assert linked_first([(7, COOKIE, "c1"), (8, COOKIE, "c2")], graph) == Carried(
        variants={}, bounded=frozenset({(7, "c1"), (8, "c2")})
    )


def test_link_graph__exactly_the_bound__complete():
    rows = [(COOKIE, f"c{n}", USER, "hub", None, None, None) for n in range(MAX_LINK_ROWS)]

    assert link_graph(rows).complete
