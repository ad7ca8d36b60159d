"""Writes of identifier links."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models.functions import Lower

from assignments.models import SubjectType, is_resource_id
from idlinks.errors import SelfLink, UnknownSubjectType
from idlinks.models import IdentifierLink


@dataclass(frozen=True)
class Identifier:
    """An identifier as a client sends it: the subject type's ID (any case) and a valid subject ID."""

    subject_type: str
    subject_id: str


def _active_subject_types(identifiers: tuple[Identifier, ...]) -> list[SubjectType]:
    """The subject type of each identifier, in order; UnknownSubjectType names every one that is
    missing or archived by its field path (`identifiers.1.subject_type`)."""
    wanted = {identifier.subject_type.lower() for identifier in identifiers if is_resource_id(identifier.subject_type)}
    found = {
        subject_type.key.lower(): subject_type
        for subject_type in SubjectType.objects.alias(lkey=Lower("key")).filter(lkey__in=wanted)
    }
    errors = []
    for index, identifier in enumerate(identifiers):
        subject_type = found.get(identifier.subject_type.lower())
        if subject_type is None:
            message = f"no subject type has the ID {identifier.subject_type!r}"
        elif subject_type.status != SubjectType.Status.ACTIVE:
            message = f"subject type {subject_type.key!r} is {subject_type.status}"
        else:
            continue
        errors.append({"field": f"identifiers.{index}.subject_type", "message": message})
    if errors:
        raise UnknownSubjectType("; ".join(f"{e['field']}: {e['message']}" for e in errors), errors=errors)
    return [found[identifier.subject_type.lower()] for identifier in identifiers]


def id_link_create(*, first: Identifier, second: Identifier) -> None:
    """Link two identifiers (CONTRACT.md section 3); linking a linked pair, in either order, changes nothing.

    Both subject types must exist and be active. The pair is stored in the
    canonical order of identifierlink_canonical_order, and the insert skips a
    row that identifierlink_pair_unique already holds, so concurrent identical
    requests store one row and none of them fails.
    """
    first_type, second_type = _active_subject_types((first, second))
    nodes = sorted([(first_type.pk, first.subject_id), (second_type.pk, second.subject_id)])
    if nodes[0] == nodes[1]:
        raise SelfLink(
            "The two identifiers are the same; an identifier cannot be linked to itself.",
            errors=[{"field": "identifiers", "message": "the two identifiers must differ"}],
        )
    (type_a, subject_id_a), (type_b, subject_id_b) = nodes
    IdentifierLink.objects.bulk_create(
        [
            IdentifierLink(
                subject_type_a_id=type_a, subject_id_a=subject_id_a, subject_type_b_id=type_b, subject_id_b=subject_id_b
            )
        ],
        ignore_conflicts=True,
    )
