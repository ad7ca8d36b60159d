"""Reads of API tokens."""

from __future__ import annotations

import hmac

from django.db.models import QuerySet

from tokens.cache import ApiTokenSnapshot, api_tokens
from tokens.crypto import token_digest, token_prefix
from tokens.metrics import api_token_cache_lookup
from tokens.models import ApiToken


def api_token_find(*, token: str) -> ApiToken | None:
    """The stored token matching a presented one, whatever its state, or None (one indexed query)."""
    prefix = token_prefix(token)
    if prefix is None:
        return None
    api_token = ApiToken.objects.filter(prefix=prefix).first()
    if api_token is None or not hmac.compare_digest(api_token.secret_hash, token_digest(token)):
        return None
    return api_token


def api_token_cached(*, token: str) -> ApiTokenSnapshot | None:
    """The stored token behind a presented one if this process's cache holds it, without a query; else None
    (api_token_load looks it up). Counts the cache lookup."""
    if token_prefix(token) is None:
        return None
    snapshot = api_tokens.get(token_digest(token))
    api_token_cache_lookup(hit=snapshot is not None)
    return snapshot


def api_token_load(*, token: str) -> ApiTokenSnapshot | None:
    """The stored token behind a presented one from the database, cached for the next requests."""
    api_token = api_token_find(token=token)
    if api_token is None:
        return None
    snapshot = ApiTokenSnapshot.of(api_token)
    api_tokens.put(snapshot)
    return snapshot


def api_token_live(*, name: str) -> ApiToken | None:
    """The token that holds a name now (not revoked; possibly expired)."""
    return ApiToken.objects.filter(name=name, revoked_at__isnull=True).first()


def api_token_list() -> QuerySet[ApiToken]:
    """Every token, revoked ones included, oldest first."""
    return ApiToken.objects.order_by("created_at", "pk")
