"""assignments/linking.py: following links, each new subject's walk through a batch's neighbourhood in memory,
and spec.followLinks through the API: a new subject takes the variant of the first assigned identifier linked
to it, at a bounded cost whatever links clients built up (POST /id-link is public through the proxy where
enabled): the link rows read are bounded, and PostgreSQL never JIT-compiles the hot path's statements, whose
planner cost the link walk pushes past jit_above_cost."""

from __future__ import annotations

import itertools
import json
import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from assignments.linking import Carried, LinkGraph, link_graph, linked_first
from assignments.models import Assignment, SubjectType
from assignments.storage_citus import assignments_distributed
from idlinks.models import IdentifierLink
from idlinks.walk import MAX_DEPTH, MAX_IDENTIFIERS, MAX_LINK_ROWS, MAX_VISITS
from tests.helpers import resources
from tests.helpers.assignments import assigned_store, reference_variant
from tests.helpers.idlinks import component_store, link, links_store
from tests.helpers.link_graphs import COOKIE, NODES, USER
from tests.helpers.observability import sample, samples
from tests.helpers.resources import BANNER_FOLLOWING_LINKS, apply_resources

EARLY, LATE = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)


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


# --- spec.followLinks through the API: a new subject takes the variant of the first assigned identifier ---


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
    assigned_store(experiment_id, subject_id, variant, created_at=timezone.now() - timedelta(minutes=minutes_ago))


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
    for subject_id, variant in (("c-b", "green"), ("c-a", "control"), ("c-c", "green")):
        assigned_store("banner", subject_id, variant, created_at=moment)
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


# --- bounded work whatever links clients built up ---


@pytest.fixture
def banner_following_links(db):
    apply_resources(*BANNER_FOLLOWING_LINKS)


def test_link_walk__component_past_the_row_bound__formula_decides_and_the_bound_is_counted(
    api, admin_token, banner_following_links
):
    # Given a component of 320 by 320 cookies, each linked to each of the other side (102,400 links:
    # more than MAX_LINK_ROWS rows for the walk), one of them assigned
    side = 320
    assert 2 * side * side > MAX_LINK_ROWS
    component_store(side)
    assigned_store("banner", "a000", "green")
    batch = [f"b{j:03d}" for j in range(100)]
    before = samples(api.get("/metrics", token=admin_token).content.decode())

    # When 100 new cookies of it are asked for
    response = api.post("/experiment-assignments", {"experiment_id": "banner", "subject_ids": batch})

    # Then each gets the formula's variant, stored as hashed, and the bounded walks are counted
    assert response.status_code == 200, response.content
    assert response.json()["assignments"] == {sid: reference_variant("banner", sid, SPLITS) for sid in batch}
    assert set(Assignment.objects.filter(subject_id__in=batch).values_list("source", flat=True)) == {"hashed"}
    after = samples(api.get("/metrics", token=admin_token).content.decode())
    bounded = "assignment_link_walks_bounded_total"
    assert sample(after, bounded, experiment="banner") - sample(before, bounded, experiment="banner") == 100


def test_link_walk__component_within_the_bounds__carried_over_and_nothing_counted(
    api, admin_token, banner_following_links
):
    # Given a component of 60 by 60 cookies, one assigned `green`
    component_store(60)
    assigned_store("banner", "a000", "green")
    batch = [f"b{j:03d}" for j in range(60)] + [f"a{i:03d}" for i in range(1, 60)]
    before = samples(api.get("/metrics", token=admin_token).content.decode())

    # When the 119 others are asked for at once
    response = api.post("/experiment-assignments", {"experiment_id": "banner", "subject_ids": batch})

    # Then every one gets `green`, linked, and no walk was bounded
    assert response.json()["assignments"] == dict.fromkeys(batch, "green")
    assert set(Assignment.objects.filter(subject_id__in=batch).values_list("source", flat=True)) == {"linked"}
    after = samples(api.get("/metrics", token=admin_token).content.decode())
    assert sample(after, "assignment_link_walks_bounded_total", experiment="banner") == sample(
        before, "assignment_link_walks_bounded_total", experiment="banner"
    )


def skewed_links(users: int, cookies_each: int) -> list:
    """Links as a site's logins make them, skewed: most cookies belong to one user or two, and a few
    shared ones (a library's computers, a bot) to hundreds."""
    rng = random.Random(20)
    pairs = set()
    for user in range(users):
        for _ in range(cookies_each):
            cookie = f"hub-{rng.randrange(10)}" if rng.random() < 0.1 else f"c-{rng.randrange(users * 4)}"
            pairs.add((("user", f"u-{user}"), ("cookie", cookie)))
    return sorted(pairs)


def plans(statements: list[str]) -> list[dict]:
    """EXPLAIN (ANALYZE, FORMAT JSON) of each statement on the service's own connection, undone after."""
    found = []
    for sql in statements:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            (plan,) = cursor.fetchone()
            found.append(plan[0] if isinstance(plan, list) else json.loads(plan)[0])
            transaction.set_rollback(True)
    return found


@pytest.mark.postgres
@pytest.mark.single_node("the recursive link walk is PostgreSQL's; on Citus links are read level by level")
def test_hot_path__skewed_link_table__no_statement_jit_compiled(api, banner_following_links):
    # Given 2,000 users with 12 cookie links each, some cookies shared by hundreds (about 24,000 links),
    # and a new cookie linked to one of them
    links_store([*skewed_links(2000, 12), (("user", "u-7"), ("cookie", "new-cookie"))])

    # When the new cookie and a new unlinked one are asked for in an experiment that follows links
    with CaptureQueriesContext(connection) as captured:
        response = api.post(
            "/experiment-assignments", {"experiment_id": "banner", "subject_ids": ["new-cookie", "other-cookie"]}
        )
    assert response.status_code == 200, response.content
    statements = [query["sql"] for query in captured.captured_queries]
    walk = next(sql for sql in statements if "WITH RECURSIVE" in sql)

    # Then no statement of the request is JIT-compiled on the service's connections...
    compiled = [plan["Plan"]["Node Type"] for plan in plans(statements) if "JIT" in plan]
    assert compiled == []
    assert len(statements) >= 3

    # ...although the table is one PostgreSQL would JIT-compile the link walk for, were JIT on
    # (SET LOCAL lasts to the end of the test's transaction: last)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = on")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + walk)
        assert "JIT" in cursor.fetchone()[0][0]
