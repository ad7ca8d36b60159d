"""The API as its clients see it: the problem+json error shape and the 400 naming one invalid field, an in-process
client with a token, and the SQL statements a request costs."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

# Written out, not imported from core.api.problems: the tests check the code against the documented value.
PROBLEM_CONTENT_TYPE = "application/problem+json"


def assert_problem(response, *, status: int, code: str) -> dict:
    """The response (Django's test client's or httpx's) is RFC 9457 problem+json with our members; returns
    the body."""
    assert response.status_code == status, response.content
    assert response.headers["Content-Type"] == PROBLEM_CONTENT_TYPE
    body = json.loads(response.content)
    assert body["type"] == "about:blank"
    assert body["status"] == status
    assert body["code"] == code
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def assert_one_invalid_field(response, field: str, message: str) -> None:
    """The response is a 400 invalid_request whose only error is `message` on `field`, its detail naming both."""
    problem = assert_problem(response, status=400, code="invalid_request")
    assert problem["errors"] == [{"field": field, "message": message}]
    assert problem["detail"] == f"{field}: {message}"


def error_fields(body: dict) -> list[str]:
    return [error["field"] for error in body["errors"]]


def request_statements(api, path: str, body: dict) -> int:
    """The SQL statements one successful POST of `body` to `path` costs."""
    with CaptureQueriesContext(connection) as captured:
        response = api.post(path, body)
    assert response.status_code == 200, response.content
    return len(captured.captured_queries)


class ApiClient:
    """HTTP calls through Django's full request stack, with a token."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.client = Client()

    def headers(self, token: str | None) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def post(self, path: str, body: Any, *, token: str | None = None, **extra):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        extra.setdefault("content_type", "application/json")
        return self.client.post(path, data, **self.headers(token or self.token), **extra)

    def get(self, path: str, *, token: str | None = None, **extra):
        return self.client.get(path, **self.headers(token or self.token), **extra)
