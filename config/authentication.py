"""API token authentication and role permissions (CONTRACT.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone
from rest_framework import authentication, exceptions, permissions

from tokens.models import ApiToken, Role
from tokens.selectors import api_token_find


@dataclass(frozen=True)
class TokenUser:
    """The caller behind a token; API callers are machines, not Django users."""

    token_name: str
    role: str

    is_authenticated = True
    is_anonymous = False


def presented_token(request) -> str | None:
    """The token from `Authorization: Bearer` or the proxy's `Authentication` header."""
    header = request.META.get("HTTP_AUTHORIZATION")
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise exceptions.AuthenticationFailed("The Authorization header must be 'Bearer <token>'.")
        return value.strip()
    header = request.META.get("HTTP_AUTHENTICATION")
    if header is not None:
        value = header.strip()
        scheme, space, rest = value.partition(" ")
        if space and scheme.lower() == "bearer":
            value = rest.strip()
        if not value:
            raise exceptions.AuthenticationFailed("The Authentication header is empty.")
        return value
    return None


class ApiTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        token = presented_token(request)
        if token is None:
            return None
        api_token = api_token_find(token=token)
        if api_token is None or not api_token.is_usable(now=timezone.now()):
            raise exceptions.AuthenticationFailed("The token is unknown, revoked or expired.")
        return TokenUser(token_name=api_token.name, role=api_token.role), api_token

    def authenticate_header(self, request) -> str:
        return "Bearer"


class _RolePermission(permissions.BasePermission):
    roles: frozenset[str] = frozenset()

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, ApiToken) and request.auth.role in self.roles


class IsProxyRole(_RolePermission):
    """The assignment and identifier-link endpoints: `proxy` and `admin` tokens."""

    roles = frozenset({Role.PROXY, Role.ADMIN})


class IsAdminRole(_RolePermission):
    """Everything else: `admin` tokens only."""

    roles = frozenset({Role.ADMIN})
