"""deploy/workers.py in isolation: which requests get the kept health threads, and gunicorn's errors rewritten."""

from __future__ import annotations

import json
import re

import pytest

from deploy.workers import is_health_check, problem_response


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (b"GET /healthz", True),
        (b"HEAD /healthz", True),
        (b"GET /healthz/ HTTP/1.1", True),
        (b"POST /healthz", False),
        (b"GET /experiment-assignments", False),
        (b"GET /heal", False),
        (b"", False),
    ],
)
def test_is_health_check(start, expected):
    assert is_health_check(start) is expected


def split(response: bytes) -> tuple[str, dict[str, str], dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    assert int(headers["content-length"]) == len(body)
    return status_line, headers, json.loads(body)


@pytest.mark.parametrize(
    ("status", "reason", "code"),
    [
        (400, "Bad Request", "invalid_request"),
        (414, "URI Too Long", "invalid_request"),
        (431, "Request Header Fields Too Large", "invalid_request"),
        (500, "Internal Server Error", "internal_error"),
    ],
)
def test_problem_response__gunicorn_html_error__same_status_as_problem_json(status, reason, code):
    html = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: text/html\r\n"
        f"Content-Length: 30\r\n\r\n<html><h1>{reason}</h1></html>"
    ).encode()

    status_line, headers, problem = split(problem_response(html))

    assert status_line == f"HTTP/1.1 {status} {reason}"
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert problem["status"] == status
    assert problem["code"] == code
    assert problem["type"] == "about:blank"
    assert "<" not in problem["detail"]
    # The request was refused before its headers were read: a request ID of its own, in the body and the header
    assert re.fullmatch(r"[0-9a-f]{32}", problem["request_id"])
    assert headers["x-request-id"] == problem["request_id"]
