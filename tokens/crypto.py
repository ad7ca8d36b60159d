"""The token format: `<prefix>.<secret>`, and the digest that is all the database keeps of it."""

from __future__ import annotations

import hashlib
import re
import secrets

PREFIX_BYTES = 6
SECRET_BYTES = 32

# 12 hex characters, a dot, 43 URL-safe base64 characters (token_urlsafe(32)).
_TOKEN_SHAPE = re.compile(r"([0-9a-f]{12})\.([A-Za-z0-9_-]{43})")


def token_generate() -> tuple[str, str]:
    """A new (prefix, token): 48 bits to find the row by, 256 bits of secret."""
    prefix = secrets.token_hex(PREFIX_BYTES)
    return prefix, f"{prefix}.{secrets.token_urlsafe(SECRET_BYTES)}"


def token_prefix(token: str) -> str | None:
    """The lookup prefix of a well-formed token; None for anything else, so garbage costs no query."""
    match = _TOKEN_SHAPE.fullmatch(token)
    return match.group(1) if match else None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
