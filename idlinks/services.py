"""Writes of identifier links."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.utils import timezone

from core.steps import Steps, steps_run
from idlinks.errors import SelfLink
from idlinks.storage import id_link_insert_steps


@dataclass(frozen=True)
class Identifier:
    """An identifier as a client sends it: the subject type's ID (any case) and a valid subject ID."""

    subject_type: str
    subject_id: str


# {field path: subject type ID} -> {field path: subject type} as steps, raising a problem naming each path whose
# type does not exist or is archived (assignments.selectors.subject_types_active_steps).
SubjectTypesActive = Callable[[dict[str, str]], Steps[dict[str, Any]]]


def id_link_create(*, first: Identifier, second: Identifier, subject_types_active: SubjectTypesActive) -> None:
    """id_link_create_steps sent on Django's connection."""
    steps_run(
        id_link_create_steps(
            vendor=connection.vendor, first=first, second=second, subject_types_active=subject_types_active
        )
    )


def id_link_create_steps(
    *, vendor: str, first: Identifier, second: Identifier, subject_types_active: SubjectTypesActive
) -> Steps[None]:
    """Link two identifiers (POST /id-link, docs/reference/api.md), as steps (core/steps.py); linking a
    linked pair, in either order, changes nothing.

    Both subject types must exist and be active, as `subject_types_active` finds them:
    subject types belong to the app above this one, which passes its own. The pair is stored in the
    canonical order of identifierlink_canonical_order, and the insert skips a
    row that identifierlink_pair_unique already holds, so concurrent identical
    requests store one row and none of them fails.
    """
    found = yield from subject_types_active(
        {
            f"identifiers.{index}.subject_type": identifier.subject_type
            for index, identifier in enumerate((first, second))
        }
    )
    first_type, second_type = found.values()
    nodes = sorted([(first_type.pk, first.subject_id), (second_type.pk, second.subject_id)])
    if nodes[0] == nodes[1]:
        raise SelfLink(
            "The two identifiers are the same; an identifier cannot be linked to itself.",
            errors=[{"field": "identifiers", "message": "the two identifiers must differ"}],
        )
    (type_a, subject_id_a), (type_b, subject_id_b) = nodes
    yield from id_link_insert_steps(
        vendor=vendor,
        subject_type_a=type_a,
        subject_id_a=subject_id_a,
        subject_type_b=type_b,
        subject_id_b=subject_id_b,
        created_at=timezone.now(),
    )
