"""Writes of API tokens."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.utils import timezone

from tokens.models import ApiToken, Role

PREFIX_BYTES = 6
SECRET_BYTES = 32


def secret_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(*, name: str, role: str = Role.PROXY, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """Create a token; returns it with the clear token, which is never stored or shown again."""
    prefix = secrets.token_hex(PREFIX_BYTES)
    token = f"{prefix}.{secrets.token_urlsafe(SECRET_BYTES)}"
    api_token = ApiToken.objects.create(
        name=name, role=role, prefix=prefix, secret_hash=secret_digest(token), expires_at=expires_at
    )
    return api_token, token


def api_token_revoke(*, name: str) -> ApiToken:
    api_token = ApiToken.objects.get(name=name)
    if api_token.revoked_at is None:
        api_token.revoked_at = timezone.now()
        api_token.save(update_fields=["revoked_at"])
    return api_token
