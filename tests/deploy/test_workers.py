"""deploy/workers.py in isolation: the server's own refusals as problem+json (tests/e2e/test_slow_database.py
sends them to the deployed server)."""

from __future__ import annotations

import json
import re
from http import HTTPStatus

import pytest

from deploy.workers import problem_response


def split(response: bytes) -> tuple[str, dict[str, str], dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    assert int(headers["content-length"]) == len(body)
    return status_line, headers, json.loads(body)


@pytest.mark.parametrize(
    "status",
    [HTTPStatus.BAD_REQUEST, HTTPStatus.REQUEST_URI_TOO_LONG, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE],
)
def test_problem_response__refusal__problem_json_with_its_status_and_an_id_of_its_own(status):
    status_line, headers, problem = split(problem_response(status))

    assert status_line == f"HTTP/1.1 {status.value} {status.phrase}"
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert problem["status"] == status.value
    assert problem["title"] == status.phrase
    assert problem["code"] == "invalid_request"
    assert problem["type"] == "about:blank"
    # The request was refused before its headers were read: a request ID of its own, in the body and the header
    assert re.fullmatch(r"[0-9a-f]{32}", problem["request_id"])
    assert headers["x-request-id"] == problem["request_id"]
