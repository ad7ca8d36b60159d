"""Following links costs a request bounded work whatever links clients built up (POST /id-link is public
through the proxy where enabled): the link rows read are bounded, and PostgreSQL never JIT-compiles
the hot path's statements, whose planner cost the link walk pushes past jit_above_cost."""

from __future__ import annotations

import json
import random

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from assignments.linking import MAX_LINK_ROWS
from assignments.models import Assignment
from tests.helpers.assignments import assigned_store, reference_variant
from tests.helpers.idlinks import component_store, links_store
from tests.helpers.observability import sample, samples
from tests.helpers.resources import BANNER_FOLLOWING_LINKS, apply_resources

SPLITS = [("control", 0.5), ("green", 0.5)]


@pytest.fixture
def config(db):
    apply_resources(*BANNER_FOLLOWING_LINKS)


def test_link_walk__component_past_the_row_bound__formula_decides_and_the_bound_is_counted(api, admin_token, config):
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


def test_link_walk__component_within_the_bounds__carried_over_and_nothing_counted(api, admin_token, config):
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
def test_hot_path__skewed_link_table__no_statement_jit_compiled(api, config):
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
