"""One rule for a token's state (tokens.models.token_state): the stored token and the verification
cache's copy of it (tokens/cache.py) always agree."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tokens.cache import ApiTokenSnapshot
from tokens.models import ACTIVE, EXPIRED, REVOKED, ApiToken

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("expires_at", "revoked_at", "state"),
    [
        (None, None, ACTIVE),
        (NOW + HOUR, None, ACTIVE),
        (NOW, None, EXPIRED),
        (NOW - HOUR, None, EXPIRED),
        (None, NOW - HOUR, REVOKED),
        (NOW - HOUR, NOW - HOUR, REVOKED),
    ],
    ids=["no-expiry", "expires-later", "expires-now", "expired", "revoked", "revoked-and-expired"],
)
def test_state__token_and_cached_copy__same_state(expires_at, revoked_at, state):
    api_token = ApiToken(pk=1, name="backend", expires_at=expires_at, revoked_at=revoked_at)

    assert api_token.state(now=NOW) == state
    assert ApiTokenSnapshot.of(api_token).state(now=NOW) == state
