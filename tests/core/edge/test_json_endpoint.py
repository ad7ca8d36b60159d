"""The edge answers the hot endpoints as DRF and Django's full middleware answer the same views: every request,
valid or not, gets the same status, headers and body from the served application (config.wsgi) as from the
URLconf's DRF view through Django's handler (django.test.Client), the request ID aside."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from config.wsgi import served_application
from tests.helpers.api import ApiClient
from tokens.models import Role
from tokens.services import api_token_create

ASSIGN = {"experiment_id": "checkout-button", "subject_ids": ["e-1", "e-2"]}
ONE_SUBJECT = {"subject": {"user": "e-1"}, "experiments": ["checkout-button"]}
LINK = {"identifiers": [{"subject_type": "user", "subject_id": "e-1"}, {"subject_type": "cookie", "subject_id": "c-1"}]}
JSON = "application/json"
# A subject ID outside ASCII, in a body encoded as its Content-Type's charset says.
LATIN_1_LINK = json.dumps(
    {"identifiers": [{"subject_type": "user", "subject_id": "ü-1"}, {"subject_type": "cookie", "subject_id": "c-1"}]},
    ensure_ascii=False,
).encode("latin-1")


def _cases() -> dict[str, tuple[str, str, Any, dict[str, Any], str | None]]:
    """name -> (method, path, body, environ keys, token role or None)."""
    return {
        "assignments made": ("POST", "/experiment-assignments", ASSIGN, {}, Role.PROXY),
        "trailing slash": ("POST", "/experiment-assignments/", ASSIGN, {}, Role.PROXY),
        "one subject": ("POST", "/assignments", ONE_SUBJECT, {}, Role.PROXY),
        "values": ("POST", "/experiment-assignments", {**ASSIGN, "include_values": True}, {}, Role.PROXY),
        "values of one subject": ("POST", "/assignments", {**ONE_SUBJECT, "include_values": True}, {}, Role.PROXY),
        "values null": ("POST", "/assignments", {**ONE_SUBJECT, "include_values": None}, {}, Role.PROXY),
        "link": ("POST", "/id-link", LINK, {}, Role.PROXY),
        "admin token": ("POST", "/assignments", ONE_SUBJECT, {}, Role.ADMIN),
        "charset": ("POST", "/experiment-assignments", ASSIGN, {"content_type": f"{JSON}; charset=utf-8"}, Role.PROXY),
        "latin-1 charset": ("POST", "/id-link", LATIN_1_LINK, {"content_type": f"{JSON}; charset=latin-1"}, Role.PROXY),
        "latin-1 body, no charset": ("POST", "/id-link", LATIN_1_LINK, {}, Role.PROXY),
        "unknown experiment": ("POST", "/experiment-assignments", {**ASSIGN, "experiment_id": "nope"}, {}, Role.PROXY),
        "invalid body": ("POST", "/experiment-assignments", {"subject_ids": []}, {}, Role.PROXY),
        "null body": ("POST", "/assignments", None, {}, Role.PROXY),
        "list body": ("POST", "/id-link", [1, 2], {}, Role.PROXY),
        "malformed json": ("POST", "/id-link", b'{"identifiers": [', {}, Role.PROXY),
        "empty body": ("POST", "/assignments", b"", {}, Role.PROXY),
        "form body": (
            "POST",
            "/assignments",
            b"a=b",
            {"content_type": "application/x-www-form-urlencoded"},
            Role.PROXY,
        ),
        "no content type": ("POST", "/assignments", b"{}", {"content_type": ""}, Role.PROXY),
        "no token": ("POST", "/experiment-assignments", ASSIGN, {}, None),
        "unknown token": ("POST", "/assignments", ONE_SUBJECT, {"HTTP_AUTHORIZATION": "Bearer nope.nope"}, None),
        "basic credentials": ("POST", "/id-link", LINK, {"HTTP_AUTHORIZATION": "Basic eDp5"}, None),
        "empty Authentication": ("POST", "/id-link", LINK, {"HTTP_AUTHENTICATION": " "}, None),
        "no token, wrong type": ("POST", "/assignments", b"x", {"content_type": "text/plain"}, None),
        "GET": ("GET", "/assignments", None, {}, Role.PROXY),
        "GET without token": ("GET", "/experiment-assignments", None, {}, None),
        "HEAD": ("HEAD", "/id-link", None, {}, Role.PROXY),
        "PUT with a body": ("PUT", "/experiment-assignments/", ASSIGN, {}, Role.PROXY),
        "DELETE": ("DELETE", "/id-link/", None, {}, Role.PROXY),
        "OPTIONS": ("OPTIONS", "/assignments", None, {}, Role.PROXY),
        "OPTIONS without token": ("OPTIONS", "/id-link", None, {}, None),
        "unknown method": ("BREW", "/assignments", None, {}, Role.PROXY),
        "host not allowed": ("POST", "/assignments", ONE_SUBJECT, {"HTTP_HOST": "evil.example"}, Role.PROXY),
        "too large": ("POST", "/assignments", b"{}", {"CONTENT_LENGTH": str(2 * 1024 * 1024)}, Role.PROXY),
    }


CASES = _cases()


def _comparable(response) -> tuple[int, dict[str, str], Any]:
    if response.content:
        assert int(response.headers.get("Content-Length", len(response.content))) == len(response.content)
    headers = {
        name: value for name, value in response.headers.items() if name not in ("X-Request-ID", "Content-Length")
    }
    body: Any = response.content
    if body and headers.get("Content-Type", "").endswith("json"):
        body = json.loads(body)
        if isinstance(body, dict):
            body.pop("request_id", None)
            # The assignments made the first time are returned stored the second.
            body.pop("new_assignments", None)
    return response.status_code, headers, body


@pytest.mark.parametrize("case", CASES)
def test_edge__any_request_to_a_hot_path__answered_as_drf_answers_it(demo_config, case):
    method, path, body, extra, role = CASES[case]
    token = api_token_create(name="edge", role=role)[1] if role else None
    raw = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    content_type = extra.pop("content_type", JSON if body is not None else None)
    environ = {**({} if content_type is None else {"CONTENT_TYPE": content_type}), **extra}
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"

    served = ApiClient(None).generic(method, path, raw, **environ)
    through_drf = Client().generic(method, path, raw, **environ)

    assert _comparable(served) == _comparable(through_drf)


def test_edge__https_redirect__as_django_answers_it(demo_config, settings):
    settings.SECURE_SSL_REDIRECT = True
    served = ApiClient(None, app=served_application()).post("/assignments", ONE_SUBJECT)
    through_drf = Client().post("/assignments", ONE_SUBJECT, content_type=JSON)

    assert served.status_code == 301
    assert _comparable(served) == _comparable(through_drf)


def test_edge__https_request__hsts_as_django_sends_it(demo_config, settings, proxy_token):
    settings.SECURE_HSTS_SECONDS = 3600
    auth = {"HTTP_AUTHORIZATION": f"Bearer {proxy_token}"}
    served = ApiClient(None, app=served_application()).post("/assignments", ONE_SUBJECT, secure=True, **auth)
    through_drf = Client().post("/assignments", ONE_SUBJECT, content_type=JSON, secure=True, **auth)

    assert served["Strict-Transport-Security"] == "max-age=3600"
    assert _comparable(served) == _comparable(through_drf)
