"""Reads of the configuration's history: every real change of a resource, newest first, with its diff."""

from __future__ import annotations

import difflib

from django.db.models.functions import Lower

from assignments.configuration.export import resource_yaml
from assignments.models import ResourceChange


def resource_history(*, kind: str, resource_id: str, limit: int | None = None) -> list[ResourceChange]:
    """The recorded changes of one resource (its ID matched ignoring case), newest first."""
    changes = (
        ResourceChange.objects.alias(lid=Lower("resource_id"))
        .filter(kind=kind, lid=resource_id.lower())
        .order_by("-resource_version")
    )
    return list(changes[:limit] if limit else changes)


def change_diff(change: ResourceChange) -> str:
    """A unified diff of the document before and after the change (all lines added for a creation)."""
    before = resource_yaml(change.before).splitlines() if change.before is not None else []
    after = resource_yaml(change.after).splitlines()
    label = f"{change.kind} {change.resource_id}"
    return "\n".join(
        difflib.unified_diff(
            before,
            after,
            fromfile=f"{label} v{change.resource_version - 1}" if change.before is not None else "(none)",
            tofile=f"{label} v{change.resource_version}",
            lineterm="",
        )
    )
