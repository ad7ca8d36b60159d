"""The change feed under load, from outside: the real server, requests that commit in another order than the
one they started in, and a follower that reads GET /changes meanwhile and must get every change exactly once.
On a Citus cluster the writers' batches span shards, so their transactions commit in two phases."""

from __future__ import annotations

import datetime
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from assignments.models import Assignment, Experiment
from idlinks.models import IdentifierLink
from tests.factories import ExperimentFactory, SubjectTypeFactory
from tests.helpers.database import lock_waits_query
from tests.helpers.server import database_url_for_tests, gunicorn, wait_until
from tokens.models import Role
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-change-feed-not-secret"
WRITERS = 8
REQUESTS_PER_WRITER = 25
# The follower's page sizes: a page boundary falls everywhere, also inside one transaction's changes.
LIMITS = (1, 2, 7, 50, 1000)
SERVED_WITHIN_SECONDS = 5


class Service:
    def __init__(self, url: str, admin: str, proxy: str) -> None:
        self.url, self.admin, self.proxy = url, admin, proxy

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture
def service() -> Iterator[Service]:
    user = SubjectTypeFactory(key="user")
    SubjectTypeFactory(key="cookie")
    for key in ("feed-a", "feed-b"):
        ExperimentFactory(key=key, subject_type=user, splits=[("control", 0.5), ("green", 0.5)])
    admin = api_token_create(name="feed-follower", role=Role.ADMIN)[1]
    proxy = api_token_create(name="feed-writer", role=Role.PROXY)[1]
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": SECRET_KEY, "DATABASE_POOL_SIZE": "8"}
    with gunicorn(env=env, workers=2) as (url, _):
        yield Service(url, admin, proxy)


def _moment(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def page(follower: httpx.Client, after: str | None, limit: int) -> dict:
    response = follower.get("/changes", params={"limit": limit, **({"after": after} if after else {})})
    assert response.status_code == 200, response.text
    return response.json()


def drain(follower: httpx.Client, after: str | None) -> tuple[list[dict], str]:
    changes: list[dict] = []
    while True:
        body = page(follower, after, 1000)
        changes += body["changes"]
        after = body["next"]
        if not body["changes"]:
            return changes, after


def assign(client: httpx.Client, experiment: str, *subject_ids: str) -> None:
    response = client.post("/experiment-assignments", json={"experiment_id": experiment, "subject_ids": subject_ids})
    assert response.status_code == 200, response.text


def keys(changes: list[dict], kind: str) -> list[tuple]:
    member = "link" if kind == "link.created" else "assignment"
    fields = (
        ("subject_type_a", "subject_id_a", "subject_type_b", "subject_id_b")
        if member == "link"
        else ("experiment_id", "subject_id", "variant_id")
    )
    return [tuple(change[member][field] for field in fields) for change in changes if change["kind"] == kind]


def stored_assignments() -> list[tuple]:
    return sorted(Assignment.objects.values_list("experiment__key", "subject_id", "variant__key"))


def stored_links() -> list[tuple]:
    return sorted(
        IdentifierLink.objects.values_list("subject_type_a__key", "subject_id_a", "subject_type_b__key", "subject_id_b")
    )


def test_a_request_that_commits_late_is_served_before_what_committed_meanwhile(service):
    experiment = Experiment.objects.get(key="feed-a")
    control = experiment.variants.get(key="control")
    with (
        service.client(service.proxy) as writer,
        service.client(service.admin) as follower,
        psycopg.connect(database_url()) as holder,
    ):
        start = page(follower, None, 1000)["next"]
        # A row of subject "late", held uncommitted: the request for it waits on the unique index.
        holder.execute(
            "INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, source, created_at) "
            "VALUES (%s, 'late', %s, 1, 'hashed', now())",
            [experiment.pk, control.pk],
        )
        waiting = threading.Thread(target=assign, args=(writer, "feed-a", "late"))
        waiting.start()
        try:
            wait_until(_waiting_on_a_lock, timeout=10)
            assign(writer, "feed-a", "early")
            held = page(follower, start, 1000)
        finally:
            holder.rollback()
            waiting.join(timeout=30)
        released = page(follower, held["next"], 1000)

    # While "late" waited, nothing after it was served, though "early" had committed.
    assert held["changes"] == [] and held["next"] == start
    assert [change["assignment"]["subject_id"] for change in released["changes"]] == ["late", "early"]
    assert Assignment.objects.filter(subject_id__in=["late", "early"]).count() == 2


def database_url() -> str:
    return database_url_for_tests().replace("postgres://", "postgresql://", 1)


def _waiting_on_a_lock() -> bool:
    with psycopg.connect(database_url(), autocommit=True) as probe:
        return probe.execute(lock_waits_query()).fetchone()[0] > 0


def test_eight_writers_and_a_follower_every_change_once_whatever_the_commit_order(service):
    pool = [f"s-{n}" for n in range(120)]
    stop = threading.Event()
    followed: list[dict] = []
    # Seconds from each change's recorded_at (its statement's start, on the same host's clock) to its being read.
    lags: list[float] = []
    failures: list[BaseException] = []

    def write(seed: int) -> None:
        chosen = random.Random(seed)
        try:
            with service.client(service.proxy) as client:
                for _ in range(REQUESTS_PER_WRITER):
                    action = chosen.random()
                    if action < 0.7:
                        # Overlapping batches: the same new subjects raced by several writers.
                        batch = chosen.sample(pool, chosen.choice((1, 3, 20)))
                        assign(client, chosen.choice(("feed-a", "feed-b")), *batch)
                    else:
                        cookie, user = f"c-{chosen.randrange(30)}", chosen.choice(pool)
                        response = client.post(
                            "/id-link",
                            json={
                                "identifiers": [
                                    {"subject_type": "cookie", "subject_id": cookie},
                                    {"subject_type": "user", "subject_id": user},
                                ]
                            },
                        )
                        assert response.status_code == 200, response.text
        except BaseException as exc:
            failures.append(exc)

    def follow() -> None:
        chosen = random.Random(0)
        after = None
        try:
            with service.client(service.admin) as follower:
                while not stop.is_set():
                    body = page(follower, after, chosen.choice(LIMITS))
                    followed.extend(body["changes"])
                    lags.extend(time.time() - _moment(change["recorded_at"]) for change in body["changes"])
                    after = body["next"]
                    time.sleep(chosen.choice((0, 0.01)))
                rest, _ = drain(follower, after)
                followed.extend(rest)
        except BaseException as exc:
            failures.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(WRITERS)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(timeout=300)
    stop.set()
    follower.join(timeout=120)

    assert not failures, failures
    cursors = Counter(change["cursor"] for change in followed)
    assert [cursor for cursor, seen in cursors.items() if seen > 1] == []
    assert sorted(keys(followed, "assignment.created")) == stored_assignments()
    assert sorted(keys(followed, "link.created")) == stored_links()
    assert len(followed) == Assignment.objects.count() + IdentifierLink.objects.count()
    # Served within the promised 5 seconds of its commit: no transaction here stays open for long.
    assert max(lags) < SERVED_WITHIN_SECONDS
