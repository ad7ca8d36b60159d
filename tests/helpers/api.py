"""The API as its clients see it: the problem+json error shape and the 400 naming one invalid field, an in-process
client of the served application with a token, and the SQL statements a request costs."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_to_bytes

from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from django.utils.datastructures import CaseInsensitiveMapping

from config.wsgi import application

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


class WsgiResponse:
    """A response as the WSGI server received it, read as Django's test client's responses are."""

    def __init__(self, status: str, headers: list[tuple[str, str]], content: bytes) -> None:
        code, _, self.reason_phrase = status.partition(" ")
        self.status_code = int(code)
        self.headers = CaseInsensitiveMapping(dict(headers))
        self.content = content

    def __getitem__(self, name: str) -> str:
        return self.headers[name]

    def has_header(self, name: str) -> bool:
        return name in self.headers

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return json.loads(self.content)


def wsgi_environ(method: str, path: str, body: bytes, **extra: Any) -> dict[str, Any]:
    """A request's WSGI environ as gunicorn builds it; `extra` keys are environ keys (HTTP_X_REQUEST_ID=...),
    `content_type` the CONTENT_TYPE, `secure` an HTTPS request."""
    path, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": method,
        # As gunicorn decodes it: percent-escapes undone, the bytes as latin-1 (PEP 3333).
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "SCRIPT_NAME": "",
        "QUERY_STRING": query,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "testserver",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "wsgi.url_scheme": "https" if extra.pop("secure", False) else "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if body:
        environ["CONTENT_LENGTH"] = str(len(body))
    content_type = extra.pop("content_type", None)
    if content_type is not None:
        environ["CONTENT_TYPE"] = content_type
    environ.update(extra)
    return environ


@contextlib.contextmanager
def connection_cleanup_held() -> Iterator[None]:
    """Requests made straight to a WSGI application run inside the test's transaction, as django.test.Client's
    do: the end-of-request connection cleanup, which would close it, is held off meanwhile."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def wsgi_request(method: str, path: str, body: bytes = b"", *, app=None, **extra: Any) -> WsgiResponse:
    """One request to the application gunicorn serves (config.wsgi, or `app`, one made as it is), inside the
    test's transaction (connection_cleanup_held)."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    with connection_cleanup_held():
        answer = (app or application)(
            wsgi_environ(method, path, body, **extra),
            lambda status, headers, exc_info=None: started.append((status, headers)),
        )
        try:
            # As the server sends it: no body in an answer to HEAD.
            content = b"" if method == "HEAD" else b"".join(answer)
        finally:
            if hasattr(answer, "close"):
                answer.close()
    return WsgiResponse(*started[0], content)


class ApiClient:
    """HTTP calls, with a token, to the application gunicorn serves (config.wsgi): the path tested is the
    path served. The methods take what django.test.Client's take: a path, a body (JSON-encoded unless text
    or bytes), and environ keys."""

    def __init__(self, token: str | None, *, app=None) -> None:
        """`app`: a WSGI application made as config.wsgi makes it (served_application), say for settings a
        test changed; the one config.wsgi made at import by default."""
        self.token = token
        self.app = app

    def headers(self, token: str | None) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def generic(self, method: str, path: str, data: Any = b"", *, token: str | None = None, **extra) -> WsgiResponse:
        text = data if isinstance(data, (str, bytes)) else json.dumps(data)
        raw = text.encode() if isinstance(text, str) else text
        return wsgi_request(method.upper(), path, raw, app=self.app, **self.headers(token or self.token), **extra)

    def post(self, path: str, data: Any = b"", *, token: str | None = None, **extra) -> WsgiResponse:
        extra.setdefault("content_type", "application/json")
        return self.generic("POST", path, data, token=token, **extra)

    def get(self, path: str, *, token: str | None = None, **extra) -> WsgiResponse:
        return self.generic("GET", path, token=token, **extra)

    def head(self, path: str, *, token: str | None = None, **extra) -> WsgiResponse:
        return self.generic("HEAD", path, token=token, **extra)

    def options(self, path: str, data: Any = b"", *, token: str | None = None, **extra) -> WsgiResponse:
        return self.generic("OPTIONS", path, data, token=token, **extra)

    def delete(self, path: str, data: Any = b"", *, token: str | None = None, **extra) -> WsgiResponse:
        return self.generic("DELETE", path, data, token=token, **extra)

    def put(self, path: str, data: Any = b"", *, token: str | None = None, **extra) -> WsgiResponse:
        return self.generic("PUT", path, data, token=token, **extra)

    def patch(self, path: str, data: Any = b"", *, token: str | None = None, **extra) -> WsgiResponse:
        return self.generic("PATCH", path, data, token=token, **extra)
