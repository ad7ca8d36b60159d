"""Property-based API test: schemathesis sends generated and malformed requests to every operation.

It runs in-process against the WSGI application, with the schema the service
serves. Each response must be no 5xx, every error problem+json (except the two
/healthz bodies), and every response must match the schema: status, content
type, headers and body.
"""

from __future__ import annotations

import json

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application
from core.api.problems import PROBLEM_CONTENT_TYPE

MAX_EXAMPLES = 50


# The schema as the service serves it (fetching it needs no database).
schema = schemathesis.openapi.from_wsgi("/api/schema", application)
# The token is sent by the test; generated `Authentication` values would win over it (docs/how-to/tokens.md).
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=MAX_EXAMPLES,
    with_security_parameters=False,
)


def error_is_problem_json(ctx, response, case) -> bool | None:
    if response.status_code < 400:
        return None
    if case.operation.path == "/healthz" and response.status_code == 503:
        return None
    content_type = response.headers.get("content-type", [""])[0]
    assert content_type == PROBLEM_CONTENT_TYPE, f"error {response.status_code} answered as {content_type!r}"
    if case.method.upper() == "HEAD":
        return None
    body = json.loads(response.content)
    assert body["status"] == response.status_code
    assert set(body) >= {"type", "title", "status", "code", "detail"}
    return True


def no_server_error(ctx, response, case) -> bool | None:
    # 503 is the documented answer to a database outage; there is none here, so any 5xx is a bug.
    assert response.status_code < 500, f"server error {response.status_code}: {response.content[:500]!r}"
    return True


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api__generated_and_malformed_requests__no_5xx_problem_json_and_match_the_schema(
    case, demo_config, proxy_token, in_test_transaction
):
    # The request is sent with a valid proxy token, so the body, not authentication, is what is tested.
    case.call_and_validate(
        headers={"Authorization": f"Bearer {proxy_token}"},
        checks=[
            no_server_error,
            error_is_problem_json,
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
            negative_data_rejection,
        ],
    )
