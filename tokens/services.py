"""Writes of API tokens."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from tokens.cache import LAST_USED_RESOLUTION, ApiTokenSnapshot, api_tokens
from tokens.crypto import token_digest, token_generate
from tokens.errors import ApiTokenInvalid, ApiTokenNameTaken, ApiTokenNotFound
from tokens.models import ApiToken, Role
from tokens.selectors import api_token_live

# Names are typed on command lines and read in `list_api_tokens` columns: no spaces.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_EXPIRES_IN_DAYS = 36_500


def api_token_validate(*, name: str, role: str, expires_at: datetime | None, now: datetime) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ApiTokenInvalid(
            f"invalid token name {name!r}: use 1 to 100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if role not in Role.values:
        raise ApiTokenInvalid(f"invalid role {role!r}: use one of {', '.join(Role.values)}")
    if expires_at is not None and expires_at <= now:
        raise ApiTokenInvalid("the expiry must be in the future")


def expiry_in_days(days: int | None, *, now: datetime) -> datetime | None:
    """The expiry `days` whole days from now; None (never) when days is None."""
    if days is None:
        return None
    if not 1 <= days <= MAX_EXPIRES_IN_DAYS:
        raise ApiTokenInvalid(f"the expiry must be between 1 and {MAX_EXPIRES_IN_DAYS} days, got {days}")
    return now + timedelta(days=days)


def api_token_create(*, name: str, role: str = Role.PROXY, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """Create a token; returns it with the clear token, which is never stored or shown again."""
    now = timezone.now()
    api_token_validate(name=name, role=role, expires_at=expires_at, now=now)
    prefix, token = token_generate()
    try:
        with transaction.atomic():
            api_token = ApiToken.objects.create(
                name=name,
                role=role,
                prefix=prefix,
                secret_hash=token_digest(token),
                created_at=now,
                expires_at=expires_at,
            )
    except IntegrityError:
        # apitoken_live_name_unique settles a race between two creators of one name.
        if api_token_live(name=name) is not None:
            raise ApiTokenNameTaken(
                f"a token named {name!r} exists already; revoke it first or pick another name"
            ) from None
        raise
    return api_token, token


def api_token_replace(
    *, name: str, role: str = Role.PROXY, expires_at: datetime | None = None
) -> tuple[ApiToken, str, ApiToken | None]:
    """Revoke the live token of that name, if any, and create a new one, in one transaction.

    Returns the new token, its clear value, and the token it replaced.
    """
    with transaction.atomic():
        replaced = ApiToken.objects.select_for_update().filter(name=name, revoked_at__isnull=True).first()
        if replaced is not None:
            _revoke(replaced, now=timezone.now())
        api_token, token = api_token_create(name=name, role=role, expires_at=expires_at)
    return api_token, token, replaced


def _revoke(api_token: ApiToken, *, now: datetime) -> bool:
    changed = ApiToken.objects.filter(pk=api_token.pk, revoked_at__isnull=True).update(revoked_at=now) == 1
    if changed:
        api_token.revoked_at = now
    # The other processes drop their copies within API_TOKEN_CACHE_SECONDS.
    api_tokens.evict(api_token.secret_hash)
    return changed


def api_token_revoke(*, name: str) -> tuple[ApiToken, bool]:
    """Revoke the token holding `name`; returns it and whether this call revoked it.

    A name whose tokens are all revoked already is not an error (the caller's aim
    holds); a name no token ever had is.
    """
    api_token = api_token_live(name=name)
    if api_token is not None:
        return api_token, _revoke(api_token, now=timezone.now())
    revoked = ApiToken.objects.filter(name=name).order_by("-revoked_at").first()
    if revoked is None:
        raise ApiTokenNotFound(f"no token is named {name!r}")
    return revoked, False


def api_tokens_revoke(*, tokens: Iterable[ApiToken]) -> int:
    """Revoke several tokens (the admin's bulk action); returns how many were live."""
    now = timezone.now()
    return sum(_revoke(api_token, now=now) for api_token in tokens)


def api_token_touch(*, pk: int, now: datetime) -> bool:
    """Set last_used_at unless it is already within LAST_USED_RESOLUTION of now.

    The condition is in the UPDATE, so processes racing to record a use write
    the row once per interval between them.
    """
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    return ApiToken.objects.filter(stale, pk=pk).update(last_used_at=now) == 1


def api_token_use_is_due(*, api_token: ApiTokenSnapshot, now: datetime) -> bool:
    """Whether a request's use of the token is to be recorded (api_token_touch), noting it as recorded: true
    at most once a minute per process, so a busy token costs no write per request."""
    return api_tokens.use_is_due(api_token.digest, now=now)
