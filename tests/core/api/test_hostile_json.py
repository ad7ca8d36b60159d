"""JSON nested far deeper than any request needs: a fast 400, nothing stored, never a 500."""

from __future__ import annotations

import json

import pytest

from assignments.models import Assignment
from tests.helpers.api import assert_problem

DEPTH = 100_000


@pytest.mark.parametrize(
    "body",
    [
        "[" * DEPTH + "]" * DEPTH,
        '{"experiment_id": "checkout-button", "subject_ids": ' + "[" * DEPTH + "]" * DEPTH + "}",
        '{"experiment_id": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + ', "subject_ids": ["u-1"]}',
    ],
    ids=["at the top", "inside subject_ids", "inside experiment_id"],
)
def test_deeply_nested_json__malformed_json_and_nothing_stored(api, demo_config, body):
    response = api.post("/experiment-assignments", body)

    problem = assert_problem(response, status=400, code="malformed_json")
    assert "nested too deeply" in problem["detail"]
    assert not Assignment.objects.exists()


def test_nested_but_parseable_subject_ids__invalid_request(api, demo_config):
    nested = "[" * 500 + '"u-1"' + "]" * 500
    body = '{"experiment_id": "checkout-button", "subject_ids": [' + nested + "]}"

    response = api.post("/experiment-assignments", body)

    problem = assert_problem(response, status=400, code="invalid_request")
    assert problem["errors"] == [{"field": "subject_ids.0", "message": "must be a string"}]
    assert not Assignment.objects.exists()


def test_deeply_nested_id_link__malformed_json(api, demo_config):
    body = json.dumps({"identifiers": []})[:-2] + "[" * DEPTH + "]" * DEPTH + "}"

    assert_problem(api.post("/id-link", body), status=400, code="malformed_json")
