"""The WSGI application (config.wsgi, core/wsgi_handlers.py): an API request through the API's shorter middleware
chain is answered exactly as through every middleware; every other request still goes through every one."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from core.wsgi_handlers import ApiHandler
from tests.helpers.database import database_options_kept
from tokens.models import Role
from tokens.services import api_token_create

with database_options_kept():
    from config.wsgi import application, django_application

REQUEST_ID = "handlers-test-0001"


def _environ(method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "localhost",
        "HTTP_X_REQUEST_ID": REQUEST_ID,
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
        "wsgi.errors": io.StringIO(),
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    environ.update({f"HTTP_{name.upper().replace('-', '_')}": value for name, value in (headers or {}).items()})
    if "HTTP_CONTENT_TYPE" in environ:
        environ["CONTENT_TYPE"] = environ.pop("HTTP_CONTENT_TYPE")
    return environ


def wsgi_call(app, method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None):
    """One request as a WSGI server makes it: (status line, headers, body)."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    environ = _environ(method, path, body=body, headers=headers)
    answer = app(environ, lambda status, headers, exc_info=None: started.append((status, headers)))
    content = b"".join(answer)
    if hasattr(answer, "close"):
        answer.close()
    status, header_list = started[0]
    return status, sorted(header_list), content


@pytest.fixture
def token(demo_config) -> str:
    return api_token_create(name="handlers", role=Role.PROXY)[1]


def _requests(token: str) -> dict[str, tuple[str, str, Any, dict[str, str]]]:
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    assign = {"experiment_id": "checkout-button", "subject_ids": ["h-1", "h-2"]}
    return {
        "assignments stored": ("POST", "/experiment-assignments", assign, auth),
        "trailing slash": ("POST", "/experiment-assignments/", assign, auth),
        "one subject": ("POST", "/assignments", {"subject": {"user": "h-1"}, "experiments": ["checkout-button"]}, auth),
        "link": (
            "POST",
            "/id-link",
            {
                "identifiers": [
                    {"subject_type": "user", "subject_id": "h-1"},
                    {"subject_type": "cookie", "subject_id": "c"},
                ]
            },
            auth,
        ),
        "invalid body": ("POST", "/experiment-assignments", {"experiment_id": 3}, auth),
        "malformed JSON": ("POST", "/experiment-assignments", b"{", auth),
        "unknown experiment": (
            "POST",
            "/experiment-assignments",
            {"experiment_id": "nope", "subject_ids": ["a"]},
            auth,
        ),
        "no token": ("POST", "/experiment-assignments", assign, {"Content-Type": "application/json"}),
        "unknown token": ("POST", "/experiment-assignments", assign, {**auth, "Authorization": "Bearer xyz"}),
        "not JSON": ("POST", "/experiment-assignments", b"a=b", {**auth, "Content-Type": "text/plain"}),
        "method not allowed": ("GET", "/experiment-assignments", None, auth),
        "options": ("OPTIONS", "/experiment-assignments", None, auth),
        "metrics, proxy token": ("GET", "/metrics", None, auth),
        "body over the limit": (
            "POST",
            "/experiment-assignments",
            b" " * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1),
            auth,
        ),
        "malformed CSRF cookie": ("POST", "/experiment-assignments", assign, {**auth, "Cookie": "csrftoken=short"}),
    }


SAME = [case for case in _requests("") if case != "malformed CSRF cookie"]


@pytest.mark.parametrize("case", SAME)
def test_api_request__answered_as_through_every_middleware(token, in_test_transaction, case):
    method, path, body, headers = _requests(token)[case]
    every_middleware = WSGIHandler()
    # Stored first, so that both answers below find the same rows.
    wsgi_call(every_middleware, method, path, body=body, headers=headers)

    expected = wsgi_call(every_middleware, method, path, body=body, headers=headers)
    answered = wsgi_call(application, method, path, body=body, headers=headers)

    assert answered == expected


def test_staff_page__through_every_middleware(db, in_test_transaction):
    # What only the full chain gives: the login form's CSRF cookie
    status, headers, _ = wsgi_call(application, "GET", "/admin/login/")

    assert status.startswith("200")
    assert any(name == "Set-Cookie" and value.strip().startswith("csrftoken=") for name, value in headers)
    assert ("X-Frame-Options", "DENY") in headers


def test_api_request__malformed_csrf_cookie__no_new_one_sent(token, in_test_transaction):
    # The one difference: CSRF does not run for the API's (exempt) views, so it sends no replacement cookie
    # (nor the Vary: Cookie that goes with it).
    method, path, body, headers = _requests(token)["malformed CSRF cookie"]

    _, every, _ = wsgi_call(WSGIHandler(), method, path, body=body, headers=headers)
    _, api, _ = wsgi_call(application, method, path, body=body, headers=headers)

    cookie = [("Set-Cookie", value) for name, value in every if name == "Set-Cookie"]
    assert len(cookie) == 1
    assert cookie[0][1].strip().startswith("csrftoken=")
    assert [header for header in every if header not in [*cookie, ("Vary", "Cookie")]] == api


def test_api_request__its_log_line_as_through_every_middleware(token, in_test_transaction, caplog):
    method, path, body, headers = _requests(token)["assignments stored"]

    with caplog.at_level("INFO", logger="config.requestlog"):
        wsgi_call(application, method, path, body=body, headers=headers)

    lines = [record for record in caplog.records if record.name == "config.requestlog"]
    assert [(line.path, line.status, line.request_id, line.token_name, line.batch_size) for line in lines] == [
        ("/experiment-assignments", 200, REQUEST_ID, "handlers", 2)
    ]


def test_fast_path__valid_request_with_a_cached_token__answered_there(token, in_test_transaction):
    method, path, body, headers = _requests(token)["assignments stored"]
    wsgi_call(WSGIHandler(), method, path, body=body, headers=headers)  # the token now cached
    fast_path = django_application.api.fast_path

    answered = fast_path.respond(_environ(method, path, body=body, headers=headers), ApiHandler)

    assert answered is not None
    assert set(json.loads(answered.content)["assignments"]) == {"h-1", "h-2"}


@pytest.mark.parametrize("case", ["invalid body", "not JSON", "no token", "unknown token", "method not allowed"])
def test_fast_path__request_it_does_not_answer__body_left_for_django(token, in_test_transaction, case):
    method, path, body, headers = _requests(token)[case]
    stored = _requests(token)["assignments stored"]
    wsgi_call(WSGIHandler(), stored[0], stored[1], body=stored[2], headers=stored[3])  # the token now cached
    environ = _environ(method, path, body=body, headers=headers)
    sent = environ["wsgi.input"].getvalue()

    assert django_application.api.fast_path.respond(environ, ApiHandler) is None
    assert environ["wsgi.input"].read() == sent
