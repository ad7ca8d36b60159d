"""POST /id-link (idlinks/api.py, docs/reference/api.md), and its cost: one statement for a link, its subject
types from a per-process cache that follows changes."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments import cache
from assignments.models import SubjectType
from idlinks.models import IdentifierLink
from tests.factories import SubjectTypeFactory
from tests.helpers.api import ApiClient, assert_one_invalid_field, assert_problem
from tests.helpers.database import database_unreachable
from tests.helpers.idlinks import LINK_PATH, link_body, stored_links


def test_id_link__new_pair__200_success_and_one_row(api, subject_types):
    # When
    response = api.post(LINK_PATH, link_body(("cookie", "c-81"), ("user", "u-1")))

    # Then
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"success": True}
    assert stored_links() == [("user", "u-1", "Cookie", "c-81")]


def test_id_link__trailing_slash__same_answer_without_redirect(api, subject_types):
    response = api.post(LINK_PATH + "/", link_body(("user", "u-1"), ("device", "d-1")))

    assert response.status_code == 200
    assert response.json() == {"success": True}
    assert len(stored_links()) == 1


def test_id_link__repeated_pair__200_and_nothing_new_stored(api, subject_types):
    # Given
    api.post(LINK_PATH, link_body(("user", "u-1"), ("cookie", "c-1")))
    first_row = IdentifierLink.objects.get()

    # When
    response = api.post(LINK_PATH, link_body(("user", "u-1"), ("cookie", "c-1")))

    # Then
    assert response.status_code == 200
    assert response.json() == {"success": True}
    assert list(IdentifierLink.objects.values_list("pk", "created_at")) == [(first_row.pk, first_row.created_at)]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("user", "u-1"), ("cookie", "c-1")),
        (("user", "u-b"), ("user", "u-a")),
        # Code point order, not a linguistic one: "B" < "a".
        (("user", "a"), ("user", "B")),
    ],
)
def test_id_link__reversed_pair__200_and_one_row(api, subject_types, first, second):
    # Given
    assert api.post(LINK_PATH, link_body(first, second)).status_code == 200

    # When
    response = api.post(LINK_PATH, link_body(second, first))

    # Then
    assert response.status_code == 200
    assert response.json() == {"success": True}
    assert IdentifierLink.objects.count() == 1


def test_id_link__subject_types_in_any_case__match_the_configured_types(api, subject_types):
    response = api.post(LINK_PATH, link_body(("USER", "u-1"), ("cOOKIE", "c-1")))

    assert response.status_code == 200
    assert stored_links() == [("user", "u-1", "Cookie", "c-1")]


def test_id_link__unknown_subject_type__400_naming_the_identifier(api, subject_types):
    response = api.post(LINK_PATH, link_body(("user", "u-1"), ("phone", "p-1")))

    body = assert_problem(response, status=400, code="unknown_subject_type")
    assert body["errors"] == [{"field": "identifiers.1.subject_type", "message": "no subject type has the ID 'phone'"}]
    assert "identifiers.1.subject_type" in body["detail"]
    assert IdentifierLink.objects.count() == 0


@pytest.mark.parametrize("subject_type", ["us\x00er", "\ud93a\udcc1user", "user\n", "\N{KELVIN SIGN}ookie"])
def test_id_link__subject_type_no_resource_id_could_be__400_unknown_subject_type(api, subject_types, subject_type):
    # Found by schemathesis: a NUL byte reached PostgreSQL ("text fields cannot contain NUL") as a 500.
    response = api.post(LINK_PATH, link_body(("user", "u-1"), (subject_type, "p-1")))

    body = assert_problem(response, status=400, code="unknown_subject_type")
    assert [error["field"] for error in body["errors"]] == ["identifiers.1.subject_type"]
    assert IdentifierLink.objects.count() == 0


def test_id_link__both_subject_types_unknown__400_naming_both(api, subject_types):
    response = api.post(LINK_PATH, link_body(("phone", "p-1"), ("email", "e-1")))

    body = assert_problem(response, status=400, code="unknown_subject_type")
    assert [error["field"] for error in body["errors"]] == [
        "identifiers.0.subject_type",
        "identifiers.1.subject_type",
    ]


def test_id_link__archived_subject_type__400_unknown_subject_type(api, subject_types):
    response = api.post(LINK_PATH, link_body(("Legacy", "l-1"), ("user", "u-1")))

    body = assert_problem(response, status=400, code="unknown_subject_type")
    assert body["errors"] == [{"field": "identifiers.0.subject_type", "message": "subject type 'legacy' is archived"}]
    assert IdentifierLink.objects.count() == 0


def test_id_link__no_subject_types_configured__400_unknown_subject_type(api):
    response = api.post(LINK_PATH, link_body(("user", "u-1"), ("cookie", "c-1")))

    assert_problem(response, status=400, code="unknown_subject_type")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("user", "u-1"), ("user", "u-1")),
        # Subject types match ignoring case, so these name one identifier.
        (("user", "u-1"), ("USER", "u-1")),
        (("cookie", "c 1 "), ("Cookie", "c 1 ")),
    ],
)
def test_id_link__identical_identifiers__400_self_link(api, subject_types, first, second):
    response = api.post(LINK_PATH, link_body(first, second))

    body = assert_problem(response, status=400, code="self_link")
    assert body["errors"] == [{"field": "identifiers", "message": "the two identifiers must differ"}]
    assert IdentifierLink.objects.count() == 0


def test_id_link__same_id_different_type_or_case__distinct_identifiers_linked(api, subject_types):
    # Subject IDs are case-sensitive; the same ID under two types names two identifiers.
    assert api.post(LINK_PATH, link_body(("user", "u-1"), ("device", "u-1"))).status_code == 200
    assert api.post(LINK_PATH, link_body(("user", "u-1"), ("user", "U-1"))).status_code == 200

    assert stored_links() == [("user", "u-1", "device", "u-1"), ("user", "U-1", "user", "u-1")]


@pytest.mark.parametrize(
    "subject_id",
    [
        " padded with spaces ",
        "Ünïcødé 用户 🙂",
        "tab\u00a0non-breaking space",
        "x" * 256,
        "'; DROP TABLE idlinks_identifierlink; --",
    ],
)
def test_id_link__unusual_subject_ids__stored_exactly_as_sent(api, subject_types, subject_id):
    response = api.post(LINK_PATH, link_body(("cookie", subject_id), ("user", subject_id)))

    assert response.status_code == 200
    assert stored_links() == [("user", subject_id, "Cookie", subject_id)]


def test_id_link__ids_differing_only_in_spaces__two_identifiers(api, subject_types):
    assert api.post(LINK_PATH, link_body(("user", "u-1"), ("user", "u-1 "))).status_code == 200

    assert stored_links() == [("user", "u-1", "user", "u-1 ")]


@pytest.mark.parametrize("count", [0, 1, 3])
def test_id_link__not_two_identifiers__400_invalid_request(api, subject_types, count):
    body = link_body(*[("user", f"u-{n}") for n in range(count)])

    response = api.post(LINK_PATH, body)

    problem = assert_problem(response, status=400, code="invalid_request")
    assert problem["errors"] == [{"field": "identifiers", "message": "must contain exactly 2 identifiers"}]
    assert IdentifierLink.objects.count() == 0


VALID = {"subject_type": "user", "subject_id": "u-1"}
NOT_AN_OBJECT = "must be an object with subject_type and subject_id"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "identifiers", "is required"),
        ({"identifiers": None}, "identifiers", "must not be null"),
        ({"identifiers": {"0": VALID, "1": VALID}}, "identifiers", "must be an array of 2 identifiers"),
        ({"identifiers": "user:u-1,cookie:c-1"}, "identifiers", "must be an array of 2 identifiers"),
        ({"identifiers": [VALID, "cookie:c-1"]}, "identifiers.1", NOT_AN_OBJECT),
        ({"identifiers": [VALID, ["cookie", "c-1"]]}, "identifiers.1", NOT_AN_OBJECT),
        ({"identifiers": [7, VALID]}, "identifiers.0", NOT_AN_OBJECT),
        ({"identifiers": [None, VALID]}, "identifiers.0", "must not be null"),
    ],
)
def test_id_link__malformed_identifiers__400_naming_the_field(api, subject_types, body, field, message):
    response = api.post(LINK_PATH, body)

    assert_one_invalid_field(response, field, message)
    assert IdentifierLink.objects.count() == 0


@pytest.mark.parametrize(
    ("second", "field", "message"),
    [
        ({"subject_id": "c-1"}, "subject_type", "is required"),
        ({"subject_type": "cookie"}, "subject_id", "is required"),
        ({"subject_type": 1, "subject_id": "c-1"}, "subject_type", "must be a string"),
        ({"subject_type": None, "subject_id": "c-1"}, "subject_type", "must not be null"),
        ({"subject_type": ["cookie"], "subject_id": "c-1"}, "subject_type", "must be a string"),
        ({"subject_type": {"id": "cookie"}, "subject_id": "c-1"}, "subject_type", "must be a string"),
        ({"subject_type": "", "subject_id": "c-1"}, "subject_type", "must not be empty"),
        ({"subject_type": "x" * 1001, "subject_id": "c-1"}, "subject_type", "must be at most 1000 characters"),
        ({"subject_type": "cookie", "subject_id": 81}, "subject_id", "must be a string"),
        ({"subject_type": "cookie", "subject_id": 8.1}, "subject_id", "must be a string"),
        ({"subject_type": "cookie", "subject_id": True}, "subject_id", "must be a string"),
        ({"subject_type": "cookie", "subject_id": None}, "subject_id", "must not be null"),
        ({"subject_type": "cookie", "subject_id": {"id": "c"}}, "subject_id", "must be a string"),
        ({"subject_type": "cookie", "subject_id": ["c-1"]}, "subject_id", "must be a string"),
        ({"subject_type": "cookie", "subject_id": ""}, "subject_id", "must not be empty"),
        ({"subject_type": "cookie", "subject_id": "c" * 257}, "subject_id", "must be at most 256 characters"),
        ({"subject_type": "cookie", "subject_id": "c\n1"}, "subject_id", "must not contain control characters"),
        ({"subject_type": "cookie", "subject_id": "c\x001"}, "subject_id", "must not contain control characters"),
        ({"subject_type": "cookie", "subject_id": "c\x851"}, "subject_id", "must not contain control characters"),
    ],
)
def test_id_link__malformed_identifier_field__400_naming_the_dotted_path(api, subject_types, second, field, message):
    response = api.post(LINK_PATH, {"identifiers": [VALID, second]})

    problem = assert_problem(response, status=400, code="invalid_request")
    assert problem["errors"] == [{"field": f"identifiers.1.{field}", "message": message}]
    assert problem["detail"] == f"identifiers.1.{field}: {message}"
    assert IdentifierLink.objects.count() == 0


def test_id_link__lone_surrogate_subject_id__400_invalid_request(api, subject_types):
    # JSON may escape a lone surrogate; it cannot be stored as UTF-8.
    raw = (
        '{"identifiers": [{"subject_type": "user", "subject_id": "u-1"},'
        ' {"subject_type": "cookie", "subject_id": "\\ud800"}]}'
    )

    response = api.post(LINK_PATH, raw)

    problem = assert_problem(response, status=400, code="invalid_request")
    assert problem["errors"] == [
        {"field": "identifiers.1.subject_id", "message": "must be valid Unicode (no lone surrogates)"}
    ]


def test_id_link__several_fields_wrong__every_one_reported(api, subject_types):
    body = {"identifiers": [{"subject_type": 1, "subject_id": None}, {"subject_type": "cookie"}]}

    problem = assert_problem(api.post(LINK_PATH, body), status=400, code="invalid_request")

    assert {error["field"] for error in problem["errors"]} == {
        "identifiers.0.subject_type",
        "identifiers.0.subject_id",
        "identifiers.1.subject_id",
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[]", "the body must be a JSON object"),
        ('"identifiers"', "the body must be a JSON object"),
        ("7", "the body must be a JSON object"),
        # DRF words a null body itself.
        ("null", "No data provided"),
    ],
)
def test_id_link__body_not_an_object__400_invalid_request(api, subject_types, raw, message):
    problem = assert_problem(api.post(LINK_PATH, raw), status=400, code="invalid_request")

    assert problem["errors"] == [{"field": "", "message": message}]


def test_id_link__malformed_json__400_malformed_json(api, subject_types):
    assert_problem(api.post(LINK_PATH, '{"identifiers": ['), status=400, code="malformed_json")


def test_id_link__form_body__415_unsupported_media_type(api, subject_types):
    response = api.post(LINK_PATH, "identifiers=x", content_type="application/x-www-form-urlencoded")

    assert_problem(response, status=415, code="unsupported_media_type")


def test_id_link__get__405_method_not_allowed(api, subject_types):
    response = api.get(LINK_PATH)

    assert_problem(response, status=405, code="method_not_allowed")
    assert "POST" in response["Allow"]


def test_id_link__no_token__401_and_nothing_stored(anonymous_api, subject_types):
    response = anonymous_api.post(LINK_PATH, link_body(("user", "u-1"), ("cookie", "c-1")))

    assert_problem(response, status=401, code="not_authenticated")
    assert response["WWW-Authenticate"] == "Bearer"
    assert IdentifierLink.objects.count() == 0


def test_id_link__unknown_token__401(anonymous_api, subject_types):
    response = anonymous_api.post(LINK_PATH, link_body(("user", "u-1"), ("cookie", "c-1")), token="abc.def")

    assert_problem(response, status=401, code="not_authenticated")


def test_id_link__admin_token__200(anonymous_api, admin_token, subject_types):
    response = anonymous_api.post(LINK_PATH, link_body(("user", "u-1"), ("cookie", "c-1")), token=admin_token)

    assert response.status_code == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_id_link__16_concurrent_identical_requests__all_200_and_one_row(proxy_token, subject_types):
    # Given: 16 clients, half sending the pair one way round and half the other, released at once
    barrier = threading.Barrier(16)
    statuses: list[int] = []
    failures: list[BaseException] = []

    def send(index: int) -> None:
        pair = [("user", "u-race"), ("cookie", "c-race")]
        if index % 2:
            pair.reverse()
        try:
            client = ApiClient(proxy_token)
            barrier.wait(timeout=10)
            statuses.append(client.post(LINK_PATH, link_body(*pair)).status_code)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()

    # When
    threads = [threading.Thread(target=send, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # Then
    assert failures == []
    assert statuses == [200] * 16
    assert stored_links() == [("user", "u-race", "Cookie", "c-race")]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_id_link__database_down__503_database_unavailable_then_recovers(api, subject_types):
    # Given: the database stops answering, and the service's open connection is gone with it
    body = link_body(("user", "u-1"), ("cookie", "c-1"))
    with database_unreachable():
        connection.close()

        # When
        response = api.post(LINK_PATH, body)

        # Then
        problem = assert_problem(response, status=503, code="database_unavailable")
        assert response["Retry-After"].isdigit()
        assert "Traceback" not in problem["detail"]

    # And when it is back, the next request reconnects by itself
    assert api.post(LINK_PATH, body).status_code == 200
    assert IdentifierLink.objects.count() == 1


# --- the cost: one statement for a link, its subject types from a per-process cache ---


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
