"""/id-link's cost: one statement for a link, its subject types from a per-process cache that follows changes."""

from __future__ import annotations

import time

from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments import cache
from assignments.models import SubjectType
from tests.factories import SubjectTypeFactory
from tests.helpers.api import assert_problem
from tests.helpers.idlinks import LINK_PATH, link_body, stored_links


def test_id_link__warm_process__one_statement_the_insert(api, subject_types):
    # Given: the token and the subject types already seen by this process
    api.post(LINK_PATH, link_body(("user", "u-0"), ("cookie", "c-0")))

    # When
    with CaptureQueriesContext(connection) as captured:
        response = api.post(LINK_PATH, link_body(("user", "u-1"), ("cookie", "c-1")))

    # Then
    assert response.status_code == 200
    assert [query["sql"].split()[0] for query in captured.captured_queries] == ["INSERT"]


def test_id_link__subject_type_created_by_another_process__usable_at_once(api, subject_types):
    # Given: a warm cache, then a type created without this process knowing
    api.post(LINK_PATH, link_body(("user", "u-0"), ("cookie", "c-0")))
    SubjectTypeFactory(key="tablet")

    # When
    response = api.post(LINK_PATH, link_body(("user", "u-1"), ("tablet", "t-1")))

    # Then
    assert response.status_code == 200
    assert ("user", "u-1", "tablet", "t-1") in stored_links()


def test_id_link__subject_type_archived_by_another_process__refused_once_the_cache_ages(
    api, subject_types, monkeypatch
):
    # Given: a warm cache trusted for 0.2 s, then `device` archived without this process knowing
    monkeypatch.setattr(cache, "SUBJECT_TYPE_CACHE_SECONDS", 0.2)
    api.post(LINK_PATH, link_body(("user", "u-0"), ("device", "d-0")))
    SubjectType.objects.filter(key="device").update(status=SubjectType.Status.ARCHIVED)

    # When: a request after the cache's age
    time.sleep(0.25)
    response = api.post(LINK_PATH, link_body(("user", "u-1"), ("device", "d-1")))

    # Then
    assert_problem(response, status=400, code="unknown_subject_type")
