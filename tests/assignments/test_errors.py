"""The transport rules (docs/reference/api.md) on the assignment endpoint: every error is problem+json."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from django.test import Client

from assignments.models import Assignment
from tests.helpers.api import assert_problem

PATH = "/experiment-assignments"
VALID = {"experiment_id": "checkout-button", "subject_ids": ["u1"]}
MIB = 1024 * 1024


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.mark.parametrize("path", ["/experiment-assignments", "/experiment-assignments/"])
def test_path__with_or_without_trailing_slash__answered_directly_never_redirected(api, demo_config, path):
    response = api.post(path, VALID)
    assert response.status_code == 200
    assert json.loads(response.content) == {"assignments": {"u1": "control"}}


@pytest.mark.parametrize("content_type", ["application/json", "application/octet-stream"])
@pytest.mark.parametrize("path", ["/experiment-assignments", "/experiment-assignments/"])
@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_wrong_method__405_problem_naming_post(api, demo_config, path, method, content_type):
    # Whatever the body's type: a method the endpoint lacks is a 405, not a 415.
    response = api.client.generic(
        method.upper(), path, json.dumps(VALID), content_type=content_type, **api.headers(api.token)
    )

    assert_problem(response, status=405, code="method_not_allowed")
    assert "POST" in response["Allow"]


@pytest.mark.parametrize(
    "path",
    ["/", "/nope", "/experiment-assignment", "/experiment-assignments//", "/experiment-assignments/x", "/api/nope/"],
)
@pytest.mark.parametrize("method", ["get", "post"])
def test_unknown_path__404_not_found_problem(api, demo_config, path, method):
    response = getattr(api.client, method)(path, **api.headers(api.token))
    assert_problem(response, status=404, code="not_found")


def test_unknown_path__without_token__still_404_problem(anonymous_api):
    assert_problem(anonymous_api.get("/nope"), status=404, code="not_found")


@pytest.mark.parametrize(
    "raw",
    [b'{"experiment_id": "checkout-button", ', b"{'experiment_id': 'x'}", b"not json", b'{"a": NaN}', b"\xff\xfe{}"],
    ids=["truncated", "single-quotes", "text", "nan", "not-utf8"],
)
def test_malformed_json__400_malformed_json(api, demo_config, raw):
    response = api.post(PATH, raw)
    assert_problem(response, status=400, code="malformed_json")
    assert Assignment.objects.count() == 0


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml", ""],
)
def test_wrong_content_type__415_unsupported_media_type(api, demo_config, content_type):
    response = api.post(PATH, json.dumps(VALID), content_type=content_type)
    assert_problem(response, status=415, code="unsupported_media_type")
    assert Assignment.objects.count() == 0


def test_json_with_charset_parameter__accepted(api, demo_config):
    response = api.post(PATH, json.dumps(VALID), content_type="application/json; charset=utf-8")
    assert response.status_code == 200


def test_body_over_1_mib__413_payload_too_large(api, demo_config):
    body = json.dumps(VALID).encode()
    oversized = body + b" " * (MIB + 1 - len(body))
    assert len(oversized) == MIB + 1

    response = api.post(PATH, oversized)

    assert_problem(response, status=413, code="payload_too_large")
    assert Assignment.objects.count() == 0


def test_body_of_exactly_1_mib__accepted(api, demo_config):
    body = json.dumps(VALID).encode()
    response = api.post(PATH, body + b" " * (MIB - len(body)))
    assert response.status_code == 200


def test_body_over_1_mib_on_unknown_path__413_problem(api, demo_config):
    assert_problem(api.post("/nope", b" " * (MIB + 1)), status=413, code="payload_too_large")


def test_validation_error__problem_lists_errors_with_fields_and_a_summary(api, demo_config):
    response = api.post(PATH, {"experiment_id": "checkout-button", "subject_ids": ["a", 3, "b", None]})

    body = assert_problem(response, status=400, code="invalid_request")
    assert body["errors"] == [
        {"field": "subject_ids.1", "message": "must be a string"},
        {"field": "subject_ids.3", "message": "must be a string"},
    ]
    assert body["detail"] == "subject_ids.1: must be a string; subject_ids.3: must be a string"


def test_unexpected_failure__500_internal_error_problem_without_internals(proxy_token, demo_config, monkeypatch):
    # Given a fault no handler knows (raised where the service would run)
    def broken(**kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr("assignments.api.assign_subjects", broken)
    client = Client(raise_request_exception=False)

    response = client.post(PATH, json.dumps(VALID), content_type="application/json", **bearer(proxy_token))

    body = assert_problem(response, status=500, code="internal_error")
    assert b"secret internal detail" not in response.content
    assert b"Traceback" not in response.content
    assert set(body) == {"type", "title", "status", "code", "detail", "request_id"}


def test_database_error__503_database_unavailable_with_retry_after(proxy_token, demo_config, monkeypatch):
    def unreachable(**kwargs):
        raise OperationalError("connection refused at 10.0.0.5")

    monkeypatch.setattr("assignments.api.assign_subjects", unreachable)

    response = Client().post(PATH, json.dumps(VALID), content_type="application/json", **bearer(proxy_token))

    assert_problem(response, status=503, code="database_unavailable")
    assert int(response["Retry-After"]) > 0
    assert b"10.0.0.5" not in response.content
