"""spec.followLinks: a new subject takes the variant of the first assigned identifier linked to it."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assignments.distribution import assignments_distributed
from assignments.linking import MAX_DEPTH
from assignments.models import Assignment, Experiment, SubjectType
from idlinks.models import IdentifierLink
from idlinks.services import Identifier, id_link_create
from tests.helpers import resources
from tests.helpers.assignments import reference_variant
from tests.helpers.resources import apply_resources

SPLITS = [("control", 0.5), ("green", 0.5)]

CONFIG = (
    resources.subject_type("user"),
    resources.subject_type("cookie"),
    resources.subject_type("device"),
    resources.experiment("banner", subject_type="cookie", follow_links=True),
    resources.experiment("plain", subject_type="cookie"),
)


@pytest.fixture
def config(db):
    apply_resources(*CONFIG)


def hashed_to(variant: str, prefix: str, *, salt: str = "banner") -> str:
    """The first `prefix-N` whose hashed variant in the experiment salted `salt` is `variant`."""
    return next(
        subject_id
        for subject_id in (f"{prefix}-{n}" for n in itertools.count())
        if reference_variant(salt, subject_id, SPLITS) == variant
    )


def link(first: tuple[str, str], second: tuple[str, str]) -> None:
    id_link_create(first=Identifier(*first), second=Identifier(*second))


def chain(*identifiers: tuple[str, str]) -> None:
    for first, second in itertools.pairwise(identifiers):
        link(first, second)


def assign(api, subject_ids: list[str], experiment_id: str = "banner") -> dict[str, str]:
    response = api.post("/experiment-assignments", {"experiment_id": experiment_id, "subject_ids": subject_ids})
    assert response.status_code == 200, response.content
    return json.loads(response.content)["assignments"]


def stored(subject_id: str, experiment_id: str = "banner") -> tuple[str, str, int]:
    row = Assignment.objects.get(experiment__key=experiment_id, subject_id=subject_id)
    return row.variant.key, row.source, row.cohort


def store(subject_id: str, variant: str, *, minutes_ago: int, experiment_id: str = "banner") -> None:
    experiment = Experiment.objects.get(key=experiment_id)
    Assignment.objects.create(
        experiment=experiment,
        subject_id=subject_id,
        variant=experiment.variants.get(key=variant),
        cohort=1,
        created_at=timezone.now() - timedelta(minutes=minutes_ago),
    )


def test_follow_links__new_cookie_linked_through_a_user_to_an_assigned_one__gets_its_variant_as_linked(api, config):
    # Given c-1 assigned green, and a new cookie that the formula would put in control
    first = hashed_to("green", "c")
    assert assign(api, [first]) == {first: "green"}
    second = hashed_to("control", "new")
    # And both cookies linked to one user afterwards
    link(("cookie", first), ("user", "u-1"))
    link(("cookie", second), ("user", "u-1"))

    # When the new cookie is asked for the first time
    answer = assign(api, [second])

    # Then it gets green, stored with source linked in the current cohort
    assert answer == {second: "green"}
    assert stored(second) == ("green", "linked", 1)
    assert stored(first) == ("green", "hashed", 1)


def test_follow_links__experiment_without_the_option__links_ignored(api, config):
    first = hashed_to("green", "c", salt="plain")
    second = hashed_to("control", "new", salt="plain")
    assign(api, [first], "plain")
    chain(("cookie", first), ("user", "u-1"), ("cookie", second))

    assert assign(api, [second], "plain") == {second: "control"}
    assert stored(second, "plain") == ("control", "hashed", 1)


def test_follow_links__several_assigned__the_earliest_wins(api, config):
    # Given two assigned cookies linked to the same user: the later one in green, the earlier in control
    new = hashed_to("green", "new")
    store("c-early", "control", minutes_ago=10)
    store("c-late", "green", minutes_ago=5)
    link(("cookie", "c-late"), ("user", "u-1"))
    link(("cookie", "c-early"), ("user", "u-1"))
    link(("cookie", new), ("user", "u-1"))

    # When the new cookie is asked for, Then the first touch wins
    assert assign(api, [new]) == {new: "control"}


def test_follow_links__earliest_not_the_nearest__wins(api, config):
    # Given a near cookie (2 links) assigned late and a far one (4 links) assigned early
    new = hashed_to("green", "new")
    store("c-near", "green", minutes_ago=1)
    store("c-far", "control", minutes_ago=60)
    chain(("cookie", new), ("user", "u-1"), ("cookie", "c-near"))
    chain(("user", "u-1"), ("device", "d-1"), ("user", "u-2"), ("cookie", "c-far"))

    assert assign(api, [new]) == {new: "control"}


def test_follow_links__same_time__the_smaller_subject_id_wins(api, config):
    moment = timezone.now() - timedelta(minutes=3)
    experiment = Experiment.objects.get(key="banner")
    for subject_id, variant in (("c-b", "green"), ("c-a", "control"), ("c-c", "green")):
        Assignment.objects.create(
            experiment=experiment,
            subject_id=subject_id,
            variant=experiment.variants.get(key=variant),
            cohort=1,
            created_at=moment,
        )
        link(("cookie", subject_id), ("user", "u-1"))
    new = hashed_to("green", "new")
    link(("cookie", new), ("user", "u-1"))

    assert assign(api, [new]) == {new: "control"}


@pytest.mark.parametrize(("links", "followed"), [(4, True), (5, False)])
def test_follow_links__chain_of_links__followed_up_to_4_links_away(api, config, links, followed):
    # Given an assigned cookie at the end of a chain of `links` links through users and devices
    far = hashed_to("green", "far")
    assign(api, [far])
    new = hashed_to("control", "new")
    middle = [("user", "u-1"), ("device", "d-1"), ("user", "u-2"), ("device", "d-2")][: links - 1]
    chain(("cookie", new), *middle, ("cookie", far))
    assert IdentifierLink.objects.count() == links

    # When the new cookie is asked for
    answer = assign(api, [new])

    # Then the variant is carried over 4 links, not 5
    assert answer == {new: "green" if followed else "control"}
    assert stored(new)[1] == ("linked" if followed else "hashed")


def test_follow_links__link_made_after_the_assignment__changes_nothing(api, config):
    # Given a cookie assigned control, then linked to a cookie assigned green earlier
    early = hashed_to("green", "early")
    store(early, "green", minutes_ago=30)
    late = hashed_to("control", "late")
    assert assign(api, [late]) == {late: "control"}
    chain(("cookie", late), ("user", "u-1"), ("cookie", early))

    # When it is asked for again, through both endpoints
    again = assign(api, [late])
    body = json.loads(api.post("/assignments", {"subject": {"cookie": late}}).content)

    # Then it keeps its variant
    assert again == {late: "control"}
    assert body["assignments"]["banner"] == "control"
    assert stored(late) == ("control", "hashed", 1)


def test_follow_links__assignments_in_other_experiments_or_of_other_types__not_carried_over(api, config):
    # Given the new cookie linked to a user and a cookie; the cookie is assigned only in `plain`,
    # and the user has a stored row in `banner` under its user ID (as a cookie with the same ID would)
    new = hashed_to("control", "new")
    other = hashed_to("green", "other", salt="plain")
    assign(api, [other], "plain")
    chain(("cookie", new), ("user", "u-1"), ("cookie", other))
    store("u-1", "green", minutes_ago=5)

    # When the new cookie is asked for in banner, Then nothing is carried over
    assert assign(api, [new]) == {new: "control"}
    assert stored(new)[1] == "hashed"


def test_follow_links__current_cohort__linked_assignment_stored_in_it(api, config):
    first = hashed_to("green", "c")
    assign(api, [first])
    new_splits = [resources.variant("control", 0.4, control=True), resources.variant("green", 0.6)]
    apply_resources(
        *CONFIG[:3],
        resources.experiment("banner", subject_type="cookie", follow_links=True, variants=new_splits),
        CONFIG[4],
    )
    new = hashed_to("control", "new")
    chain(("cookie", new), ("user", "u-1"), ("cookie", first))

    assign(api, [new])

    assert stored(new) == ("green", "linked", 2)


def test_follow_links__batch__linked_and_hashed_subjects_each_decided(api, config):
    # Given 3 assigned cookies, each linked through its own user to one new cookie of a batch of 300
    owners = [hashed_to("green", f"owner{i}") for i in range(3)]
    assign(api, owners)
    batch = [f"b-{n}" for n in range(300)]
    linked = {batch[10]: owners[0], batch[150]: owners[1], batch[299]: owners[2]}
    for index, (new, owner) in enumerate(linked.items()):
        chain(("cookie", new), ("user", f"u-{index}"), ("cookie", owner))

    # When the batch is asked for at once
    answer = assign(api, batch)

    # Then the linked ones are green and linked, every other one is the formula's and hashed
    for subject_id in batch:
        expected = "green" if subject_id in linked else reference_variant("banner", subject_id, SPLITS)
        assert answer[subject_id] == expected
    sources = dict(Assignment.objects.filter(subject_id__in=batch).values_list("subject_id", "source"))
    assert {s for s, source in sources.items() if source == "linked"} == set(linked)


def test_follow_links__subject_assignments_endpoint__carries_over_too_and_agrees(api, config):
    first = hashed_to("green", "c")
    assign(api, [first])
    new = hashed_to("control", "new")
    chain(("cookie", new), ("user", "u-1"), ("cookie", first))

    body = json.loads(api.post("/assignments", {"subject": {"cookie": new, "user": "u-1"}}).content)

    assert body["assignments"] == {"banner": "green", "plain": reference_variant("plain", new, SPLITS)}
    assert body["new_assignments"] == ["banner", "plain"]
    assert stored(new) == ("green", "linked", 1)
    assert assign(api, [new]) == {new: "green"}


@pytest.mark.parametrize(("assigned", "followed"), [("c-0998", True), ("c-0999", False)])
def test_follow_links__more_identifiers_than_the_bound__the_first_1000_visited(api, config, assigned, followed):
    # Given a new cookie linked to two users, each linked to 600 cookies: 1,202 identifiers within 2
    # links. The walk visits 1,000 of them by distance, subject type and ID: the 2 users, then
    # c-0001 to c-0998.
    user, cookie = SubjectType.objects.get(key="user"), SubjectType.objects.get(key="cookie")
    assert user.pk < cookie.pk  # so the user is side a of each link (identifierlink_canonical_order)
    new = hashed_to("control", "new")
    cookies = [new, new] + [f"c-{n:04d}" for n in range(1, 1201)]
    IdentifierLink.objects.bulk_create(
        IdentifierLink(subject_type_a=user, subject_id_a=f"u-{index % 2}", subject_type_b=cookie, subject_id_b=c)
        for index, c in enumerate(cookies)
    )
    store(assigned, "green", minutes_ago=60)

    # When the new cookie is asked for
    answer = assign(api, [new])

    # Then the assigned cookie counts only if it is among the first 1,000 visited
    assert answer == {new: "green" if followed else "control"}


@pytest.mark.parametrize("follow_links", [True, False])
def test_follow_links__1_or_1000_new_subjects__same_number_of_statements(api, config, follow_links):
    experiment_id = "banner" if follow_links else "plain"
    assign(api, ["warm-up"], experiment_id)
    chain(("cookie", "warm-up"), ("user", "u-1"), ("cookie", "x-0"))

    counts = []
    for batch in (["x-0"], [f"x-{n}" for n in range(1, 1001)]):
        with CaptureQueriesContext(connection) as captured:
            assign(api, batch, experiment_id)
        counts.append(len(captured.captured_queries))

    walks = "idlinks_identifierlink" in " ".join(q["sql"] for q in captured.captured_queries)
    assert walks == follow_links
    if assignments_distributed():
        # On Citus the walk reads one level per statement: bounded by the depth, not the batch
        assert max(counts) <= counts[1] - 2 + MAX_DEPTH + 1
    else:
        assert counts[0] == counts[1]


def test_follow_links__batch_sharing_a_neighbourhood__each_subject_walked_from_itself(api, config):
    # Given an assigned cookie 1 link from one new cookie and 5 links from another, both in one batch
    assigned = hashed_to("green", "assigned")
    assign(api, [assigned])
    near, far = hashed_to("control", "near"), hashed_to("control", "far")
    link(("cookie", near), ("user", "u-0"))
    link(("user", "u-0"), ("cookie", assigned))
    chain(("cookie", far), ("device", "d-1"), ("user", "u-1"), ("device", "d-2"), ("user", "u-2"), ("cookie", assigned))

    # When both are asked for at once
    answer = assign(api, [near, far])

    # Then the walk shared by the batch still measures each subject's own distance
    assert answer == {near: "green", far: "control"}
    assert (stored(near)[1], stored(far)[1]) == ("linked", "hashed")
