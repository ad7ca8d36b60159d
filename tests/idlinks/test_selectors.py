"""idlinks/selectors.py: identifiers_connected: resolving an identifier to everything linked to it, by the walk of
following links."""

from __future__ import annotations

import pytest

from assignments.storage_citus import assignments_distributed
from idlinks import storage
from idlinks.models import IdentifierLink
from idlinks.selectors import ConnectedIdentifier, identifiers_connected
from idlinks.walk import FANOUT, MAX_DEPTH, MAX_IDENTIFIERS
from tests.helpers.idlinks import link, links_store


def unrelated_links() -> list:
    """Links of other identifiers, stored beside a hub's so that the table's statistics look like a real
    table's: a table of one hub's links alone has one distinct identifier on the hub's side, so the
    planner expects a thousand rows from every lookup on that side and scans the table for each step of
    the walk instead of using the index (seconds, once earlier tests have left dead rows behind)."""
    return [(("user", f"u-{index:04d}"), ("device", f"d-{index:04d}")) for index in range(2000)]


def connected(subject_types, subject_type: str, subject_id: str, **bounds):
    return identifiers_connected(subject_type_pk=subject_types[subject_type].pk, subject_id=subject_id, **bounds)


def found(result) -> list[tuple[str, str, int]]:
    return [(item.subject_type, item.subject_id, item.distance) for item in result.identifiers]


def chain(subject_type: str, length: int, prefix: str = "n") -> None:
    """n0 - n1 - ... - n{length-1}, all of one subject type."""
    for index in range(length - 1):
        link((subject_type, f"{prefix}{index}"), (subject_type, f"{prefix}{index + 1}"))


def test_identifiers_connected__across_subject_types__whole_component_by_distance(subject_types):
    # Given: a device seen with a cookie, the cookie logged in as a user, the user with a second cookie
    link(("device", "d-1"), ("cookie", "c-1"))
    link(("cookie", "c-1"), ("user", "u-1"))
    link(("user", "u-1"), ("cookie", "c-2"))
    link(("user", "someone-else"), ("cookie", "c-9"))

    # When
    result = connected(subject_types, "device", "d-1")

    # Then
    assert found(result) == [("Cookie", "c-1", 1), ("user", "u-1", 2), ("Cookie", "c-2", 3)]
    assert result.truncated is False


def test_identifiers_connected__from_the_other_end__same_component(subject_types):
    link(("device", "d-1"), ("cookie", "c-1"))
    link(("cookie", "c-1"), ("user", "u-1"))

    result = connected(subject_types, "user", "u-1")

    assert found(result) == [("Cookie", "c-1", 1), ("device", "d-1", 2)]


def test_identifiers_connected__one_distance__subject_types_in_creation_order_then_ids_by_code_point(subject_types):
    # Given: a user linked to a device, two cookies and another user (types created user, Cookie, device)
    for other in [("device", "d-1"), ("cookie", "c-b"), ("cookie", "C-a"), ("user", "u-2")]:
        link(("user", "u-1"), other)

    result = connected(subject_types, "user", "u-1")

    # Then the walk's order of following links, not the keys' alphabetical order
    assert found(result) == [("user", "u-2", 1), ("Cookie", "C-a", 1), ("Cookie", "c-b", 1), ("device", "d-1", 1)]
    assert result.identifiers[0] == ConnectedIdentifier(subject_type="user", subject_id="u-2", distance=1)


def test_identifiers_connected__subject_id_case_differs__not_the_same_identifier(subject_types):
    link(("cookie", "c-1"), ("user", "u-1"))

    assert connected(subject_types, "cookie", "C-1").identifiers == ()


@pytest.mark.parametrize(("subject_type", "subject_id"), [("user", "nobody"), ("device", "u-1")])
def test_identifiers_connected__unlinked_or_linked_only_under_another_type__empty_and_complete(
    subject_types, subject_type, subject_id
):
    link(("cookie", "c-1"), ("user", "u-1"))

    result = connected(subject_types, subject_type, subject_id)

    assert result.identifiers == ()
    assert result.truncated is False


def test_identifiers_connected__cycle__each_identifier_once(subject_types):
    link(("user", "a"), ("user", "b"))
    link(("user", "b"), ("user", "c"))
    link(("user", "c"), ("user", "a"))

    result = connected(subject_types, "user", "a")

    assert found(result) == [("user", "b", 1), ("user", "c", 1)]
    assert result.truncated is False


def test_identifiers_connected__archived_subject_type__still_followed(subject_types):
    # Links made while `legacy` was active still join data recorded under it.
    IdentifierLink.objects.create(
        subject_type_a=subject_types["user"],
        subject_id_a="u-1",
        subject_type_b=subject_types["legacy"],
        subject_id_b="l-1",
    )
    link(("cookie", "c-1"), ("user", "u-1"))

    result = connected(subject_types, "cookie", "c-1")

    assert found(result) == [("user", "u-1", 1), ("legacy", "l-1", 2)]


def test_identifiers_connected__unicode_and_spaces__returned_exactly(subject_types):
    link(("user", " Ünïcødé 🙂 "), ("cookie", "c 1"))

    result = connected(subject_types, "cookie", "c 1")

    assert found(result) == [("user", " Ünïcødé 🙂 ", 1)]


def test_identifiers_connected__deeper_than_the_depth__truncated(subject_types):
    chain("user", 6)

    result = connected(subject_types, "user", "n0", depth=3)

    assert found(result) == [("user", "n1", 1), ("user", "n2", 2), ("user", "n3", 3)]
    assert result.truncated is True


def test_identifiers_connected__ends_exactly_at_the_depth__complete(subject_types):
    chain("user", 4)

    result = connected(subject_types, "user", "n0", depth=3)

    assert [item.subject_id for item in result.identifiers] == ["n1", "n2", "n3"]
    assert result.truncated is False


def test_identifiers_connected__deeper_than_max_depth__truncated_at_max_depth_by_default(subject_types):
    chain("user", MAX_DEPTH + 2)

    result = connected(subject_types, "user", "n0")

    assert [item.distance for item in result.identifiers] == list(range(1, MAX_DEPTH + 1))
    assert result.truncated is True


def test_identifiers_connected__more_than_max_identifiers__the_first_by_the_walks_order_and_truncated(
    subject_types,
):
    links_store(
        [*unrelated_links(), *((("user", "hub"), ("Cookie", f"c-{index:04d}")) for index in range(MAX_IDENTIFIERS + 5))]
    )

    result = connected(subject_types, "user", "hub")

    assert [item.subject_id for item in result.identifiers] == [f"c-{index:04d}" for index in range(MAX_IDENTIFIERS)]
    assert result.truncated is True


@pytest.mark.parametrize(("farther", "truncated"), [(False, False), (True, True)])
def test_identifiers_connected__exactly_max_identifiers__truncated_only_if_more_lie_farther(
    subject_types, farther, truncated
):
    # Given: a cookie linked to 500 users and 500 devices (below FANOUT on either side of its links)
    half = MAX_IDENTIFIERS // 2
    pairs = [
        (("Cookie", "hub"), (other, f"{other}-{index:04d}")) for other in ("user", "device") for index in range(half)
    ]
    links_store(pairs + ([(("device", "device-0000"), ("Cookie", "c-1"))] if farther else []))

    result = connected(subject_types, "cookie", "hub")

    assert len(result.identifiers) == MAX_IDENTIFIERS
    assert result.truncated is truncated


def test_identifiers_connected__links_of_one_side_read_up_to_fanout__truncated(subject_types):
    # Given: a user with exactly FANOUT links on its side: the read stops there, so more may exist
    links_store([*unrelated_links(), *((("user", "hub"), ("Cookie", f"c-{index:04d}")) for index in range(FANOUT))])

    result = connected(subject_types, "user", "hub")

    assert len(result.identifiers) == FANOUT
    assert result.truncated is True


def test_identifiers_connected__dense_small_component__complete_not_truncated(subject_types):
    # Given: 12 identifiers, each linked to every other (66 links, 132 link ends)
    nodes = [("user", f"k{index:02}") for index in range(12)]
    for index, first in enumerate(nodes):
        for second in nodes[index + 1 :]:
            link(first, second)

    # When
    result = connected(subject_types, "user", "k00")

    # Then
    assert [item.subject_id for item in result.identifiers] == [f"k{index:02}" for index in range(1, 12)]
    assert result.truncated is False


def test_identifiers_connected__past_the_row_bound__empty_and_truncated(subject_types, monkeypatch):
    # Given: a component whose links are more rows than the walk may read (the bound made small here)
    monkeypatch.setattr(storage, "MAX_LINK_ROWS", 10)
    for index in range(11):
        link(("user", "hub"), ("cookie", f"c-{index}"))

    result = connected(subject_types, "user", "hub")

    # Then the walk does not start, as on the hot path, and says so
    assert result.identifiers == ()
    assert result.truncated is True


def test_identifiers_connected__wide_levels__two_queries(subject_types, django_assert_num_queries):
    # Given: a hub with 300 cookies, each cookie with its own device
    for index in range(300):
        link(("user", "hub"), ("cookie", f"c-{index}"))
        link(("cookie", f"c-{index}"), ("device", f"d-{index}"))

    # When / Then: the links (one statement; on Citus one per level, to the one past the depth that
    # ends the walk), then the subject types
    with django_assert_num_queries(4 if assignments_distributed() else 2):
        result = connected(subject_types, "user", "hub")
    assert len(result.identifiers) == 600
    assert result.truncated is False


@pytest.mark.parametrize("depth", [0, -1, MAX_DEPTH + 1])
def test_identifiers_connected__depth_out_of_range__value_error(subject_types, depth):
    with pytest.raises(ValueError, match="depth must be from 1 to"):
        connected(subject_types, "user", "u-1", depth=depth)
