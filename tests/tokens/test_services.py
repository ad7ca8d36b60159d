"""Token writes, the verification cache and the last-used throttle."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tokens.cache import api_tokens
from tokens.errors import ApiTokenInvalid, ApiTokenNameTaken, ApiTokenNotFound
from tokens.models import ApiToken, Role
from tokens.selectors import api_token_find, api_token_load
from tokens.services import (
    api_token_create,
    api_token_replace,
    api_token_revoke,
    api_token_touch,
    api_token_use_is_due,
    expiry_in_days,
)

ASSIGN_BODY = json.dumps({"experiment_id": "checkout-button", "subject_ids": ["u1"]})


def assign(token: str):
    return Client().post(
        "/experiment-assignments", ASSIGN_BODY, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def token_queries(queries) -> list[str]:
    return [query["sql"] for query in queries if "tokens_apitoken" in query["sql"]]


def test_create__stores_only_a_digest__and_the_token_finds_its_row(db):
    api_token, token = api_token_create(name="backend", role=Role.ADMIN)

    stored = ApiToken.objects.get(pk=api_token.pk)
    assert token.partition(".")[2] not in (stored.prefix + stored.secret_hash)
    assert len(stored.secret_hash) == 64
    assert stored.role == Role.ADMIN
    assert api_token_find(token=token) == stored


def test_create__two_tokens__differ(db):
    _, first = api_token_create(name="a")
    _, second = api_token_create(name="b")

    assert first != second
    assert first.partition(".")[0] != second.partition(".")[0]


def test_create__live_name_taken__refused_and_nothing_stored(db):
    api_token_create(name="backend")

    with pytest.raises(ApiTokenNameTaken, match="'backend' exists already"):
        api_token_create(name="backend")

    assert ApiToken.objects.count() == 1


def test_create__name_of_a_revoked_token__allowed(db):
    api_token_create(name="backend")
    api_token_revoke(name="backend")

    api_token_create(name="backend")

    assert [(t.name, t.revoked_at is None) for t in ApiToken.objects.order_by("pk")] == [
        ("backend", False),
        ("backend", True),
    ]


@pytest.mark.parametrize("name", ["", "has space", "-leading-dash", "x" * 101, "tab\tname", "ünïcode"])
def test_create__invalid_name__refused(db, name):
    with pytest.raises(ApiTokenInvalid, match="invalid token name"):
        api_token_create(name=name)

    assert not ApiToken.objects.exists()


def test_create__invalid_role_or_past_expiry__refused(db):
    with pytest.raises(ApiTokenInvalid, match="invalid role"):
        api_token_create(name="x", role="root")
    with pytest.raises(ApiTokenInvalid, match="in the future"):
        api_token_create(name="x", expires_at=timezone.now() - timedelta(seconds=1))

    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("days", [0, -1, 36_501])
def test_expiry_in_days__out_of_range__refused(days):
    with pytest.raises(ApiTokenInvalid, match="between 1 and 36500 days"):
        expiry_in_days(days, now=timezone.now())


def test_revoke__unknown_name__refused(db):
    with pytest.raises(ApiTokenNotFound, match="no token is named 'ghost'"):
        api_token_revoke(name="ghost")


def test_revoke__twice__second_call_reports_no_change(db):
    api_token_create(name="backend")

    first, first_changed = api_token_revoke(name="backend")
    second, second_changed = api_token_revoke(name="backend")

    assert (first_changed, second_changed) == (True, False)
    assert second.revoked_at == first.revoked_at


def test_replace__live_token__revoked_and_a_new_one_works(demo_config):
    _, old = api_token_create(name="demo")

    new_token, new, replaced = api_token_replace(name="demo", role=Role.ADMIN)

    assert replaced is not None and replaced.revoked_at is not None
    assert new_token.role == Role.ADMIN
    assert assign(old).status_code == 401
    assert assign(new).status_code == 200


def test_replace__no_token_of_that_name__just_creates(db):
    _, token, replaced = api_token_replace(name="demo")

    assert replaced is None
    assert api_token_find(token=token) is not None


def test_verify__recently_verified_token__no_database_query(demo_config, proxy_token):
    # Given a token verified once
    assert assign(proxy_token).status_code == 200

    # When it is used again
    with CaptureQueriesContext(connection) as queries:
        response = assign(proxy_token)

    # Then the request does not touch the token table
    assert response.status_code == 200
    assert token_queries(queries.captured_queries) == []


def test_verify__revoked_in_this_process__refused_at_once(demo_config):
    _, token = api_token_create(name="backend")
    assert assign(token).status_code == 200

    api_token_revoke(name="backend")

    assert assign(token).status_code == 401


@override_settings(API_TOKEN_CACHE_SECONDS=0.3)
def test_verify__revoked_by_another_process__refused_once_the_cache_entry_ages_out(demo_config):
    # Given a token this process has verified and cached
    api_token, token = api_token_create(name="backend")
    assert assign(token).status_code == 200

    # When another process revokes it (a write this process's cache does not see)
    ApiToken.objects.filter(pk=api_token.pk).update(revoked_at=timezone.now())

    # Then it is still accepted from the cache, and refused after API_TOKEN_CACHE_SECONDS
    assert assign(token).status_code == 200
    time.sleep(0.35)
    assert assign(token).status_code == 401


def test_load__unknown_token__not_cached(db):
    api_token_load(token="0123456789ab." + "A" * 43)

    assert len(api_tokens.snapshots) == 0


def test_touch__within_a_minute__no_write(db):
    api_token, _ = api_token_create(name="backend")
    start = timezone.now()

    first = api_token_touch(pk=api_token.pk, now=start)
    second = api_token_touch(pk=api_token.pk, now=start + timedelta(seconds=59))
    third = api_token_touch(pk=api_token.pk, now=start + timedelta(seconds=61))

    assert (first, second, third) == (True, False, True)
    assert ApiToken.objects.get(pk=api_token.pk).last_used_at == start + timedelta(seconds=61)


def test_use_is_due__within_a_minute_in_one_process__not_due(db):
    # Given a token whose use was just recorded
    _, token = api_token_create(name="backend")
    snapshot = api_token_load(token=token)
    start = timezone.now()
    first = api_token_use_is_due(api_token=snapshot, now=start)

    # When it is used again within the minute, and again after it
    with CaptureQueriesContext(connection) as asked:
        soon = api_token_use_is_due(api_token=snapshot, now=start + timedelta(seconds=30))
        later = api_token_use_is_due(api_token=snapshot, now=start + timedelta(seconds=61))

    # Then only the first and the later use are due, and asking costs no query
    assert (first, soon, later) == (True, False, True)
    assert token_queries(asked.captured_queries) == []


def test_request__sets_last_used_at_once(demo_config, proxy_token):
    before = timezone.now()

    assign(proxy_token)
    first = ApiToken.objects.get(name="test-proxy").last_used_at
    assign(proxy_token)
    second = ApiToken.objects.get(name="test-proxy").last_used_at

    assert first is not None and first >= before
    assert second == first


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_touch__processes_racing__one_write_per_minute():
    # Given a token and eight workers recording a use at the same moment
    api_token, _ = api_token_create(name="backend")
    now = timezone.now()
    barrier = threading.Barrier(8)
    results = []

    def touch():
        try:
            barrier.wait()
            results.append(api_token_touch(pk=api_token.pk, now=now))
        finally:
            connection.close()

    threads = [threading.Thread(target=touch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then exactly one of them wrote the row
    assert sorted(results) == [False] * 7 + [True]
