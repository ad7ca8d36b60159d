"""Times as the token commands print them."""

from __future__ import annotations

from datetime import UTC, datetime


def timestamp(value: datetime | None, *, empty: str = "-") -> str:
    """ISO 8601 in UTC to the second, e.g. 2026-11-23T09:31:00Z."""
    if value is None:
        return empty
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
