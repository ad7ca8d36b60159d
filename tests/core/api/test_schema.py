"""GET /api/schema and /api/docs: public, complete, and usable offline."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from drf_spectacular.validation import validate_schema

from core.api.schema import PROBLEM_CODES
from core.version import VERSION

SCHEMA_PATHS = ["/api/schema", "/api/schema/"]
DOCS_PATHS = ["/api/docs", "/api/docs/"]
BAD_TOKEN = {"HTTP_AUTHORIZATION": "Bearer 0123456789ab." + "A" * 43}


@pytest.fixture
def openapi(db) -> dict:
    response = Client().get("/api/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return json.loads(response.content)


@pytest.mark.parametrize("path", SCHEMA_PATHS)
@pytest.mark.parametrize("headers", [{}, BAD_TOKEN], ids=["no-token", "bad-token"])
def test_schema__public_with_or_without_slash__openapi_3(db, path, headers):
    response = Client().get(path, **headers)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi")
    assert response.content.startswith(b"openapi: 3.")


def test_schema__as_json__valid_openapi_3(openapi):
    validate_schema(openapi)

    assert openapi["openapi"].startswith("3.")


def test_schema__info_version__the_service_version(openapi):
    assert openapi["info"]["version"] == VERSION == "1.0.0"


def test_schema__operations__exactly_those_documented(openapi):
    operations = {(path, method) for path, item in openapi["paths"].items() for method in item}

    assert operations == {
        ("/experiment-assignments", "post"),
        ("/assignments", "post"),
        ("/id-link", "post"),
        ("/healthz", "get"),
        ("/healthz", "head"),
        ("/metrics", "get"),
        ("/changes", "get"),
        ("/ofrep/v1/evaluate/flags/{key}", "post"),
        ("/ofrep/v1/evaluate/flags", "post"),
    }


@pytest.mark.parametrize(
    ("path", "statuses"),
    [
        ("/experiment-assignments", {"400", "401", "403", "404", "409", "413", "415", "429", "500", "503"}),
        ("/assignments", {"400", "401", "403", "404", "413", "415", "429", "500", "503"}),
        ("/id-link", {"400", "401", "403", "413", "415", "429", "500", "503"}),
    ],
)
def test_schema__token_operations__every_error_a_problem_with_its_headers(openapi, path, statuses):
    operation = openapi["paths"][path]["post"]

    assert set(operation["responses"]) == {"200"} | statuses
    for status in statuses:
        response = operation["responses"][status]
        assert list(response["content"]) == ["application/problem+json"]
        assert response["content"]["application/problem+json"]["schema"] == {"$ref": "#/components/schemas/Problem"}
    assert operation["responses"]["401"]["headers"]["WWW-Authenticate"]["schema"]["enum"] == ["Bearer"]
    assert "Retry-After" in operation["responses"]["503"]["headers"]
    assert operation["security"] == [{"bearerToken": []}, {"authenticationHeader": []}]


def test_schema__problem_component__documented_members(openapi):
    schemas = openapi["components"]["schemas"]
    problem = schemas["Problem"]

    assert set(problem["properties"]) == {
        "type",
        "title",
        "status",
        "code",
        "detail",
        "errors",
        "experiment_status",
        "request_id",
    }
    assert set(problem["required"]) == {"type", "title", "status", "code", "detail", "request_id"}
    assert schemas["ProblemCode"]["enum"] == PROBLEM_CODES
    assert set(schemas["ProblemFieldError"]["required"]) == {"field", "message"}


def test_schema__requests__documented_bounds(openapi, settings):
    schemas = openapi["components"]["schemas"]
    subject_ids = schemas["ExperimentAssignmentsRequest"]["properties"]["subject_ids"]
    identifiers = schemas["IdLinkRequest"]["properties"]["identifiers"]

    assert set(schemas["ExperimentAssignmentsRequest"]["required"]) == {"experiment_id", "subject_ids"}
    assert (subject_ids["minItems"], subject_ids["maxItems"]) == (1, settings.ASSIGNMENT_MAX_SUBJECTS)
    assert (subject_ids["items"]["minLength"], subject_ids["items"]["maxLength"]) == (1, 256)
    assert (identifiers["minItems"], identifiers["maxItems"]) == (2, 2)
    assert set(schemas["Identifier"]["required"]) == {"subject_type", "subject_id"}
    assert schemas["ExperimentAssignmentsResponse"]["properties"]["assignments"]["additionalProperties"] == {
        "type": "string"
    }
    assert schemas["IdLinkResponse"]["properties"]["success"] == {"type": "boolean"}


def test_schema__assignments_request_and_response__bounds_defaults_and_reasons(openapi):
    schemas = openapi["components"]["schemas"]
    request = schemas["AssignmentsRequest"]
    subject, experiments = request["properties"]["subject"], request["properties"]["experiments"]
    response = schemas["AssignmentsResponse"]

    assert request["required"] == ["subject"]
    assert (subject["type"], subject["minProperties"], subject["maxProperties"]) == ("object", 1, 10)
    assert subject["additionalProperties"]["maxLength"] == 256
    assert (experiments["minItems"], experiments["maxItems"]) == (1, 100)
    assert (request["properties"]["assign"]["type"], request["properties"]["assign"]["default"]) == ("boolean", True)
    assert set(response["required"]) == {"assignments", "new_assignments", "unassigned"}
    reasons = response["properties"]["unassigned"]["additionalProperties"]
    assert reasons["enum"] == [
        "experiment_not_active",
        "subject_type_missing",
        "not_assigned",
        "enrollment_not_started",
        "enrollment_closed",
        "held_out",
        "layer_excluded",
        "attributes_missing",
        "not_targeted",
        "outside_coverage",
    ]
    examples = openapi["paths"]["/assignments"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert len(examples) == 2


def test_schema__security_schemes__bearer_and_authentication_header_and_ofreps_api_key(openapi):
    schemes = openapi["components"]["securitySchemes"]

    assert schemes == {
        "bearerToken": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <token>`."},
        "authenticationHeader": {
            "type": "apiKey",
            "in": "header",
            "name": "Authentication",
            "description": schemes["authenticationHeader"]["description"],
        },
        "apiKeyHeader": {
            "type": "apiKey",
            "in": "header",
            "name": "X-API-Key",
            "description": schemes["apiKeyHeader"]["description"],
        },
    }


@pytest.mark.parametrize("path", ["/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags"])
def test_schema__ofrep__three_ways_to_send_the_token(openapi, path):
    assert openapi["paths"][path]["post"]["security"] == [
        {"bearerToken": []},
        {"authenticationHeader": []},
        {"apiKeyHeader": []},
    ]


def test_schema__healthz__public_with_its_two_bodies(openapi):
    for method in ("get", "head"):
        operation = openapi["paths"]["/healthz"][method]
        assert operation["security"] == []
        assert set(operation["responses"]) == {"200", "503"}
    get = openapi["paths"]["/healthz"]["get"]["responses"]
    assert get["503"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Health"}
    assert openapi["components"]["schemas"]["Health"]["properties"]["status"]["enum"] == ["ok", "unavailable"]


def test_schema__metrics__behind_a_token_text_or_a_problem(openapi):
    operation = openapi["paths"]["/metrics"]["get"]

    assert operation["security"] == [{"bearerToken": []}, {"authenticationHeader": []}]
    assert set(operation["responses"]) == {"200", "401", "403", "404", "500", "503"}
    assert list(operation["responses"]["200"]["content"]) == ["text/plain"]
    assert "Role: `admin`" in operation["description"]


def test_schema__every_response__declares_the_request_id_header(openapi):
    for path, item in openapi["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                header = response["headers"]["X-Request-ID"]
                assert header["required"] is True, (path, method, status)
                assert header["schema"]["pattern"] == "^[A-Za-z0-9._:+/=@-]{1,128}$"


@pytest.mark.parametrize("path", DOCS_PATHS)
@pytest.mark.parametrize("headers", [{}, BAD_TOKEN], ids=["no-token", "bad-token"])
def test_docs__public_with_or_without_slash__html(db, path, headers):
    response = Client().get(path, **headers)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"swagger-ui" in response.content


def test_docs__assets__all_local_and_served(db):
    # Given the docs page
    page = Client().get("/api/docs").content.decode()

    # Then it names no other host (no CDN), and every asset it loads is served here
    assert re.findall(r"https?://", page) == []
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert {asset.rsplit(".", 1)[-1] for asset in assets} >= {"js", "css"}
    for asset in assets:
        assert asset.startswith("/static/")
        response = Client().get(asset)
        assert response.status_code == 200, asset
        assert len(b"".join(response.streaming_content)) > 100, asset


def test_schema__changes__its_parameters_and_problems(openapi):
    operation = openapi["paths"]["/changes"]["get"]

    assert {parameter["name"]: parameter["in"] for parameter in operation["parameters"]} == {
        "after": "query",
        "limit": "query",
    }
    assert set(operation["responses"]) == {"200", "400", "401", "403", "410", "500", "503"}
    assert (
        operation["responses"]["410"]["content"]["application/problem+json"]["examples"]["CursorExpired"]["value"][
            "code"
        ]
        == "cursor_expired"
    )
