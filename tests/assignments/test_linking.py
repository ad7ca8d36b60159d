"""assignments/linking.py: each new subject's walk through a batch's neighbourhood, in memory."""

from __future__ import annotations

from datetime import UTC, datetime

from assignments.linking import MAX_IDENTIFIERS, LinkGraph, linked_first, visited

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

    assert linked_first([(7, COOKIE, "new"), (8, COOKIE, "new"), (9, COOKIE, "new")], graph) == {
        (7, "new"): 72,
        (8, "new"): 82,
    }
