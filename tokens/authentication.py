"""API token authentication, its OpenAPI security schemes and role permissions (docs/reference/api.md,
docs/how-to/tokens.md)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from core.middleware.requestlog import request_log_note
from core.steps import Steps, steps_run
from tokens.cache import ApiTokenSnapshot
from tokens.models import EXPIRED, REVOKED, Role
from tokens.selectors import api_token_cached, api_token_load
from tokens.services import api_token_touch, api_token_use_is_due


@dataclass(frozen=True)
class TokenUser:
    """The caller behind a token; API callers are machines, not Django users."""

    token_name: str
    role: str

    is_authenticated = True
    is_anonymous = False


def _strip_bearer(value: str) -> str:
    scheme, space, rest = value.partition(" ")
    return rest.strip() if space and scheme.lower() == "bearer" else value


def presented_token(request) -> str | None:
    """The token the request carries, or None when it carries none.

    `Authentication` (the header the forwarding proxy sets, value `<token>` or
    `Bearer <token>`) wins whenever it is present, and `Authorization` is then
    not read at all: a proxy that adds `Authentication` may pass on an
    `Authorization` meant for a hop in front of it (a WAF's Basic credentials, a
    platform's OAuth token). Without it, `Authorization` must be `Bearer <token>`.
    """
    header = request.META.get("HTTP_AUTHENTICATION")
    if header is not None:
        value = _strip_bearer(header.strip())
        if not value:
            raise exceptions.AuthenticationFailed("The Authentication header is empty.")
        return value
    header = request.META.get("HTTP_AUTHORIZATION")
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise exceptions.AuthenticationFailed("The Authorization header must be 'Bearer <token>'.")
        return value.strip()
    return None


def _verified_and_used(token: str) -> Steps[ApiTokenSnapshot]:
    """The usable token behind `token`, its use recorded: from the cache, mostly, with no step at all; a
    token not cached is loaded, and a use due to be recorded written, as steps of the sync connection."""
    api_token = api_token_cached(token=token) or (yield partial(api_token_load, token=token))
    now = timezone.now()
    if api_token is None:
        raise exceptions.AuthenticationFailed("The token is not known.")
    state = api_token.state(now=now)
    if state == REVOKED:
        raise exceptions.AuthenticationFailed("The token has been revoked.")
    if state == EXPIRED:
        raise exceptions.AuthenticationFailed("The token has expired.")
    if api_token_use_is_due(api_token=api_token, now=now):
        yield partial(api_token_touch, pk=api_token.pk, now=now)
    return api_token


def presented_ofrep_token(request) -> str | None:
    """The token an OpenFeature evaluation carries: as presented_token reads it, else `X-API-Key: <token>`,
    the header OpenFeature's OFREP providers are commonly configured with. Where several are sent, the
    same order decides: Authentication, then Authorization, then X-API-Key."""
    token = presented_token(request)
    if token is not None:
        return token
    header = request.META.get("HTTP_X_API_KEY")
    if header is None:
        return None
    value = header.strip()
    if not value:
        raise exceptions.AuthenticationFailed("The X-API-Key header is empty.")
    return value


class ApiTokenAuthentication(authentication.BaseAuthentication):
    # Where the request's token is read from.
    presented = staticmethod(presented_token)

    def authenticate(self, request):
        return steps_run(self.authenticate_steps(request))

    def authenticate_steps(self, request) -> Steps[tuple[TokenUser, ApiTokenSnapshot] | None]:
        """authenticate's answer as steps (core/steps.py), for the edge's drivers."""
        token = self.presented(request)
        if token is None:
            return None
        api_token = yield from _verified_and_used(token)
        request_log_note(token_name=api_token.name)
        return TokenUser(token_name=api_token.name, role=api_token.role), api_token

    def authenticate_header(self, request) -> str:
        return "Bearer"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Either header carries the token (docs/how-to/tokens.md): two alternative schemes."""

    target_class = ApiTokenAuthentication
    name = ["bearerToken", "authenticationHeader"]

    def get_security_requirement(self, auto_schema):
        return [{name: []} for name in self.name]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <token>`."},
            {
                "type": "apiKey",
                "in": "header",
                "name": "Authentication",
                "description": "`Authentication: <token>` or `Authentication: Bearer <token>`, as a forwarding "
                "proxy sends it. When present it is used and `Authorization` is ignored.",
            },
        ]


class OfrepTokenAuthentication(ApiTokenAuthentication):
    """The OpenFeature evaluation endpoints' tokens: also from `X-API-Key`."""

    presented = staticmethod(presented_ofrep_token)


class OfrepTokenScheme(OpenApiAuthenticationExtension):
    """The two schemes of every endpoint (ApiTokenScheme defines them), and `X-API-Key`."""

    target_class = OfrepTokenAuthentication
    name = ["apiKeyHeader"]

    def get_security_requirement(self, auto_schema):
        return [{name: []} for name in [*ApiTokenScheme.name, *self.name]]

    def get_security_definition(self, auto_schema):
        return [
            {
                "type": "apiKey",
                "in": "header",
                "name": "X-API-Key",
                "description": "`X-API-Key: <token>`, on the OpenFeature evaluation paths only; read when neither "
                "`Authentication` nor `Authorization` is sent.",
            }
        ]


class _RolePermission(permissions.BasePermission):
    roles: frozenset[str] = frozenset()

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, ApiTokenSnapshot) and request.auth.role in self.roles


class IsProxyRole(_RolePermission):
    """The assignment and identifier-link endpoints: `proxy` and `admin` tokens."""

    roles = frozenset({Role.PROXY, Role.ADMIN})
    message = "This endpoint needs a token of role proxy or admin."


class IsClientRole(_RolePermission):
    """The OpenFeature evaluation endpoints: `client`, `proxy` and `admin` tokens."""

    roles = frozenset({Role.CLIENT, Role.PROXY, Role.ADMIN})
    message = "This endpoint needs a token of role client, proxy or admin."


class IsAdminRole(_RolePermission):
    """Everything else: `admin` tokens only."""

    roles = frozenset({Role.ADMIN})
    message = "This endpoint needs a token of role admin."
