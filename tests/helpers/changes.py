"""Reading the change feed as a client that follows it does."""

from __future__ import annotations

import pytest

# On PostgreSQL a change is served once the transaction that made it has ended, and a test's own transaction
# never does: tests of the feed commit (transactional_db), on SQLite too, where a change is served once written.
FEED_DB = pytest.mark.django_db(transaction=True)


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
