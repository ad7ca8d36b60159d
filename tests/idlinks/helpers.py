"""Shared pieces of the identifier-link tests."""

from __future__ import annotations

from idlinks.models import IdentifierLink
from idlinks.services import Identifier, id_link_create

LINK_PATH = "/id-link"
PROBLEM_CONTENT_TYPE = "application/problem+json"


def link_body(*identifiers: tuple[str, str]) -> dict:
    return {"identifiers": [{"subject_type": t, "subject_id": i} for t, i in identifiers]}


def link(first: tuple[str, str], second: tuple[str, str]) -> None:
    id_link_create(first=Identifier(*first), second=Identifier(*second))


def stored_links() -> list[tuple[str, str, str, str]]:
    """Every stored row as (type a, ID a, type b, ID b), type keys as configured."""
    return list(
        IdentifierLink.objects.order_by("pk").values_list(
            "subject_type_a__key", "subject_id_a", "subject_type_b__key", "subject_id_b"
        )
    )


def assert_problem(response, *, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM_CONTENT_TYPE
    body = response.json()
    assert body["status"] == status
    assert body["code"] == code
    return body
