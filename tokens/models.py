from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils import timezone


class Role(models.TextChoices):
    PROXY = "proxy", "proxy"
    # Only the OpenFeature evaluation endpoints: a token meant to ship inside web and mobile apps.
    CLIENT = "client", "client"
    ADMIN = "admin", "admin"


# Django's add and change permissions let staff create and revoke proxy tokens; an admin-role
# token may call everything, so creating or revoking one needs this as well (docs/how-to/tokens.md).
ADMIN_ROLE_PERMISSION = ("manage_admin_role_apitoken", "Can create and revoke API tokens of role admin")

ACTIVE, EXPIRED, REVOKED = "active", "expired", "revoked"


def token_state(*, expires_at: datetime | None, revoked_at: datetime | None, now: datetime) -> str:
    """ACTIVE, EXPIRED or REVOKED: the one rule, for a stored token and for the verification cache's copy
    (tokens/cache.py), which must never disagree on whether a token is usable. Revoked wins over expired."""
    if revoked_at is not None:
        return REVOKED
    if expires_at is not None and expires_at <= now:
        return EXPIRED
    return ACTIVE


class ApiToken(models.Model):
    """A bearer token; only a SHA-256 digest of the secret is stored.

    The token's first part, `prefix`, is stored in clear so that a presented token
    is found with one indexed lookup; the secret is high-entropy, so a plain
    digest (not a slow password hash) is enough to make a database leak useless.

    A name belongs to one live token at a time: once a token is revoked its name
    may be given to a new one, and the revoked row stays as a record.
    """

    name = models.CharField(max_length=100)
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.PROXY)
    prefix = models.CharField(max_length=16)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        permissions = [ADMIN_ROLE_PERMISSION]
        constraints = [
            models.UniqueConstraint(
                fields=["name"], condition=Q(revoked_at__isnull=True), name="apitoken_live_name_unique"
            ),
            models.UniqueConstraint(fields=["prefix"], name="apitoken_prefix_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="apitoken_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.role})"

    def state(self, *, now: datetime) -> str:
        return token_state(expires_at=self.expires_at, revoked_at=self.revoked_at, now=now)
