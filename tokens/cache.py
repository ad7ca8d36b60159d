"""The per-process cache of verified tokens: no database round trip per request.

An entry lives API_TOKEN_CACHE_SECONDS, so a revocation made by any process
takes effect everywhere within that time; the revoking process evicts its own
entry at once. Expiry needs no database: the cached `expires_at` is compared
with the clock on every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from core.cache import ProcessCache, TimeToLive
from tokens.models import ApiToken, token_state

MAX_CACHED_TOKENS = 10_000
# last_used_at is kept to this resolution: one write per token per interval, not one per request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


@dataclass(frozen=True)
class ApiTokenSnapshot:
    """What authentication needs of a stored token; never the secret, only its digest."""

    pk: int
    name: str
    role: str
    digest: str
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @classmethod
    def of(cls, api_token: ApiToken) -> ApiTokenSnapshot:
        return cls(
            pk=api_token.pk,
            name=api_token.name,
            role=api_token.role,
            digest=api_token.secret_hash,
            expires_at=api_token.expires_at,
            revoked_at=api_token.revoked_at,
            last_used_at=api_token.last_used_at,
        )

    def state(self, *, now: datetime) -> str:
        return token_state(expires_at=self.expires_at, revoked_at=self.revoked_at, now=now)


class ApiTokenCache:
    """Snapshots of stored tokens keyed by digest, and when this process last recorded each one's use.

    Keyed by the digest rather than the token so the clear secret is held no
    longer than the request that carried it. A dict lookup by digest leaks no
    timing an attacker can use: they cannot steer the digest of what they send.
    Unknown tokens are not cached, so a stream of made-up tokens cannot grow it.
    """

    def __init__(self) -> None:
        self.snapshots: ProcessCache[str, ApiTokenSnapshot] = ProcessCache(
            max_entries=MAX_CACHED_TOKENS, policy=TimeToLive(lambda: settings.API_TOKEN_CACHE_SECONDS)
        )
        # A recorded use matters for LAST_USED_RESOLUTION, and no longer.
        self.uses: ProcessCache[str, datetime] = ProcessCache(
            max_entries=MAX_CACHED_TOKENS, policy=TimeToLive(LAST_USED_RESOLUTION.total_seconds)
        )

    def get(self, digest: str) -> ApiTokenSnapshot | None:
        return self.snapshots.get(digest)

    def put(self, snapshot: ApiTokenSnapshot) -> None:
        self.snapshots.put(snapshot.digest, snapshot)
        last_used_at = snapshot.last_used_at
        if last_used_at is not None:
            self.uses.put_unless(snapshot.digest, last_used_at, keep=lambda known: known >= last_used_at)

    def use_is_due(self, digest: str, *, now: datetime) -> bool:
        """True, and notes the use, when last_used_at may be older than LAST_USED_RESOLUTION."""
        return self.uses.put_unless(digest, now, keep=lambda last: last > now - LAST_USED_RESOLUTION)

    def evict(self, digest: str) -> None:
        self.snapshots.forget(digest)


api_tokens = ApiTokenCache()
