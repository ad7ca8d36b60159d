"""identifiers_connected: resolving an identifier to everything linked to it."""

from __future__ import annotations

import pytest

from idlinks.models import IdentifierLink
from idlinks.selectors import ConnectedIdentifier, identifiers_connected
from tests.idlinks.helpers import link


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
    result = identifiers_connected(subject_type="device", subject_id="d-1")

    # Then
    assert found(result) == [("Cookie", "c-1", 1), ("user", "u-1", 2), ("Cookie", "c-2", 3)]
    assert result.truncated is False


def test_identifiers_connected__from_the_other_end__same_component(subject_types):
    link(("device", "d-1"), ("cookie", "c-1"))
    link(("cookie", "c-1"), ("user", "u-1"))

    result = identifiers_connected(subject_type="user", subject_id="u-1")

    assert found(result) == [("Cookie", "c-1", 1), ("device", "d-1", 2)]


def test_identifiers_connected__subject_type_in_any_case__found(subject_types):
    link(("cookie", "c-1"), ("user", "u-1"))

    result = identifiers_connected(subject_type="COOKIE", subject_id="c-1")

    assert result.identifiers == (ConnectedIdentifier(subject_type="user", subject_id="u-1", distance=1),)


def test_identifiers_connected__subject_id_case_differs__not_the_same_identifier(subject_types):
    link(("cookie", "c-1"), ("user", "u-1"))

    assert identifiers_connected(subject_type="cookie", subject_id="C-1").identifiers == ()


@pytest.mark.parametrize(("subject_type", "subject_id"), [("user", "nobody"), ("no-such-type", "u-1")])
def test_identifiers_connected__unlinked_or_unknown__empty_and_complete(subject_types, subject_type, subject_id):
    link(("cookie", "c-1"), ("user", "u-1"))

    result = identifiers_connected(subject_type=subject_type, subject_id=subject_id)

    assert result.identifiers == ()
    assert result.truncated is False


def test_identifiers_connected__cycle__each_identifier_once(subject_types):
    link(("user", "a"), ("user", "b"))
    link(("user", "b"), ("user", "c"))
    link(("user", "c"), ("user", "a"))

    result = identifiers_connected(subject_type="user", subject_id="a")

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

    result = identifiers_connected(subject_type="cookie", subject_id="c-1")

    assert found(result) == [("user", "u-1", 1), ("legacy", "l-1", 2)]


def test_identifiers_connected__unicode_and_spaces__returned_exactly(subject_types):
    link(("user", " Ünïcødé 🙂 "), ("cookie", "c 1"))

    result = identifiers_connected(subject_type="cookie", subject_id="c 1")

    assert found(result) == [("user", " Ünïcødé 🙂 ", 1)]


def test_identifiers_connected__deeper_than_max_depth__truncated(subject_types):
    chain("user", 6)

    result = identifiers_connected(subject_type="user", subject_id="n0", max_depth=3)

    assert found(result) == [("user", "n1", 1), ("user", "n2", 2), ("user", "n3", 3)]
    assert result.truncated is True


def test_identifiers_connected__ends_exactly_at_max_depth__complete(subject_types):
    chain("user", 4)

    result = identifiers_connected(subject_type="user", subject_id="n0", max_depth=3)

    assert [item.subject_id for item in result.identifiers] == ["n1", "n2", "n3"]
    assert result.truncated is False


def test_identifiers_connected__more_than_max_identifiers__truncated_at_the_bound(subject_types):
    for index in range(10):
        link(("user", "hub"), ("cookie", f"c-{index}"))

    result = identifiers_connected(subject_type="user", subject_id="hub", max_identifiers=4)

    assert len(result.identifiers) == 4
    assert {item.subject_id for item in result.identifiers} < {f"c-{index}" for index in range(10)}
    assert result.truncated is True


def test_identifiers_connected__exactly_max_identifiers__complete(subject_types):
    for index in range(4):
        link(("user", "hub"), ("cookie", f"c-{index}"))

    result = identifiers_connected(subject_type="user", subject_id="hub", max_identifiers=4)

    assert len(result.identifiers) == 4
    assert result.truncated is False


def test_identifiers_connected__dense_small_component__complete_not_truncated(subject_types):
    # Given: 12 identifiers, each linked to every other (66 links, 132 link ends)
    nodes = [("user", f"k{index:02}") for index in range(12)]
    for index, first in enumerate(nodes):
        for second in nodes[index + 1 :]:
            link(first, second)

    # When: the bound leaves room for exactly the other 11
    result = identifiers_connected(subject_type="user", subject_id="k00", max_identifiers=11)

    # Then
    assert [item.subject_id for item in result.identifiers] == [f"k{index:02}" for index in range(1, 12)]
    assert result.truncated is False


def test_identifiers_connected__wide_levels__one_query_per_level(subject_types, django_assert_num_queries):
    # Given: a hub with 300 cookies, each cookie with its own device
    for index in range(300):
        link(("user", "hub"), ("cookie", f"c-{index}"))
        link(("cookie", f"c-{index}"), ("device", f"d-{index}"))

    # When / Then: subject types, level 1 (300 found), level 2 (300 found), level 3 (none)
    with django_assert_num_queries(4):
        result = identifiers_connected(subject_type="user", subject_id="hub")
    assert len(result.identifiers) == 600
    assert result.truncated is False


@pytest.mark.parametrize(("max_depth", "max_identifiers"), [(0, 10), (10, 0), (-1, -1)])
def test_identifiers_connected__bounds_below_one__value_error(subject_types, max_depth, max_identifiers):
    with pytest.raises(ValueError, match="at least 1"):
        identifiers_connected(
            subject_type="user", subject_id="u-1", max_depth=max_depth, max_identifiers=max_identifiers
        )
