"""docs/reference/api.md and ofrep.md, the API reference, checked against the OpenAPI schema the service serves: no
drift."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from tests.helpers import PROJECT_DIR

DOC = PROJECT_DIR / "docs" / "reference" / "api.md"
# The OpenFeature endpoints' page of the reference.
OFREP_DOC = PROJECT_DIR / "docs" / "reference" / "ofrep.md"
FIELD_ROW = re.compile(r"^\| `([a-z_]+)` \| (?:string|array|object|boolean)", re.MULTILINE)
CODE_ROW = re.compile(r"^\| `([a-z_]+)` \| (\d{3}) \|", re.MULTILINE)
MEMBER_ROW = re.compile(r"^\| `([a-z_]+)` \| (string|integer|array) \| (always)?", re.MULTILINE)


@pytest.fixture(scope="module")
def openapi(django_db_blocker) -> dict:
    with django_db_blocker.unblock():
        response = Client().get("/api/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return json.loads(response.content)


def sections(*docs) -> dict[str, str]:
    """The docs' `## ` sections by heading (api.md's unless told)."""
    text = "".join(doc.read_text(encoding="utf-8") for doc in docs or [DOC])
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def section_of(path: str, method: str) -> str:
    found = [
        text
        for heading, text in sections(DOC, OFREP_DOC).items()
        if path in heading.split() and method.upper() in heading.split()
    ]
    assert len(found) == 1, (
        f"docs/reference/api.md or ofrep.md needs one section headed with {method.upper()} and {path}"
    )
    return found[0]


def operations(openapi: dict):
    for path, item in openapi["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_api_docs__every_operation__a_section_listing_exactly_its_statuses(openapi):
    for path, method, operation in operations(openapi):
        section = section_of(path, method)
        listed = re.search(r"^Statuses: (.*?)\.$", section, flags=re.MULTILINE | re.DOTALL)
        assert listed, f"{method} {path}: no 'Statuses: ...' line"
        assert set(re.findall(r"\b\d{3}\b", listed.group(1))) == set(operation["responses"]), f"{method} {path}"


def test_api_docs__request_fields__exactly_those_of_the_schema(openapi):
    for path, method, operation in operations(openapi):
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        documented = set(FIELD_ROW.findall(section_of(path, method)))
        if body is None:
            assert not documented, f"{method} {path}"
            continue
        component = body["schema"]["$ref"].rsplit("/", 1)[1]
        assert documented == set(openapi["components"]["schemas"][component]["properties"]), f"{method} {path}"


def test_api_docs__error_codes__exactly_those_of_the_schema(openapi):
    codes = dict(CODE_ROW.findall(sections()["Errors"]))

    assert set(codes) == set(openapi["components"]["schemas"]["ProblemCode"]["enum"])
    for path, method, operation in operations(openapi):
        for status, response in operation["responses"].items():
            for example in response.get("content", {}).get("application/problem+json", {}).get("examples", {}).values():
                code = example["value"]["code"]
                assert codes[code] == status, f"{method} {path}: {code} is {status} in the schema"


def test_api_docs__problem_members__exactly_those_of_the_schema_always_ones_required(openapi):
    rows = MEMBER_ROW.findall(sections()["Errors"])
    problem = openapi["components"]["schemas"]["Problem"]

    assert {name for name, _, _ in rows} == set(problem["properties"])
    assert {name for name, _, always in rows if always} == set(problem["required"])
