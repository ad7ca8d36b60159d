"""Reading the change feed as a client that follows it does."""

from __future__ import annotations

import pytest
from django.db import connection

# On PostgreSQL a change is served once the transaction that made it has ended, and a test's own transaction
# never does: tests of the feed commit there (transactional_db). SQLite serves a change once written; Django's
# flush, which ends a transactional test, would meet the count triggers on the way there.
FEED_DB = pytest.mark.django_db(transaction=connection.vendor == "postgresql")


def feed_read(api, after: str | None = None, *, limit: int = 1000) -> list[dict]:
    """Every change after `after` (from the oldest kept without it) that can be served now, page by page."""
    changes: list[dict] = []
    while True:
        query = f"limit={limit}" + (f"&after={after}" if after else "")
        response = api.get(f"/changes?{query}")
        assert response.status_code == 200, response.content
        body = response.json()
        changes += body["changes"]
        after = body["next"]
        if len(body["changes"]) < limit:
            return changes
