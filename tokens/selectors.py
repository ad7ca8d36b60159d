"""Reads of API tokens."""

from __future__ import annotations

import hmac

from tokens.models import ApiToken
from tokens.services import secret_digest


def api_token_find(*, token: str) -> ApiToken | None:
    """The stored token matching a presented one, whatever its state, or None."""
    prefix, dot, _ = token.partition(".")
    if not dot or not prefix:
        return None
    api_token = ApiToken.objects.filter(prefix=prefix).first()
    if api_token is None or not hmac.compare_digest(api_token.secret_hash, secret_digest(token)):
        return None
    return api_token
