"""Who may call the API (docs/reference/api.md; the header rules in docs/how-to/tokens.md)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tokens.crypto import token_generate
from tokens.models import Role
from tokens.services import api_token_create, api_token_revoke

ASSIGN_BODY = json.dumps({"experiment_id": "checkout-button", "subject_ids": ["u1"]})


def assign(**headers):
    return Client().post("/experiment-assignments", ASSIGN_BODY, content_type="application/json", **headers)


def assert_not_authenticated(response, *, detail_contains: str = "") -> None:
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "not_authenticated"
    assert body["status"] == 401
    assert detail_contains in body["detail"]


def test_auth__no_token__401_with_www_authenticate(demo_config):
    assert_not_authenticated(assign())


@pytest.mark.parametrize(
    "authorization",
    ["Basic dXNlcjpwYXNz", "Token {token}", "Bearer", "Bearer   ", "{token}"],
    ids=["basic", "token-scheme", "bearer-without-token", "bearer-blank", "no-scheme"],
)
def test_auth__authorization_without_bearer_scheme__401(demo_config, proxy_token, authorization):
    response = assign(HTTP_AUTHORIZATION=authorization.format(token=proxy_token))

    assert_not_authenticated(response, detail_contains="must be 'Bearer <token>'")


@pytest.mark.parametrize(
    "token",
    ["not-a-token", "abc.def", "{prefix}.{secret}x", " . "],
    ids=["no-dot", "too-short", "too-long", "blank-parts"],
)
def test_auth__malformed_token__401(demo_config, proxy_token, token):
    prefix, _, secret = proxy_token.partition(".")

    response = assign(HTTP_AUTHORIZATION=f"Bearer {token.format(prefix=prefix, secret=secret)}")

    assert_not_authenticated(response, detail_contains="not known")


def test_auth__well_formed_unknown_token__401(demo_config, proxy_token):
    _, unknown = token_generate()

    assert_not_authenticated(assign(HTTP_AUTHORIZATION=f"Bearer {unknown}"), detail_contains="not known")


def test_auth__known_prefix_wrong_secret__401(demo_config, proxy_token):
    # Given a token whose prefix exists but whose secret does not match
    prefix, _, secret = proxy_token.partition(".")
    forged = f"{prefix}.{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}"

    assert_not_authenticated(assign(HTTP_AUTHORIZATION=f"Bearer {forged}"), detail_contains="not known")


def test_auth__revoked_token__401(demo_config):
    _, token = api_token_create(name="leaving")
    api_token_revoke(name="leaving")

    assert_not_authenticated(assign(HTTP_AUTHORIZATION=f"Bearer {token}"), detail_contains="revoked")


def test_auth__expired_token__401(demo_config):
    # Given a token that expired a moment ago (the expiry is set in the database, as time would)
    api_token, token = api_token_create(name="old", expires_at=timezone.now() + timedelta(days=1))
    type(api_token).objects.filter(pk=api_token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert_not_authenticated(assign(HTTP_AUTHORIZATION=f"Bearer {token}"), detail_contains="expired")


def test_auth__token_expiring_while_cached__refused_from_its_expiry_on(demo_config):
    # Given a token verified (and so cached) shortly before it expires
    _, token = api_token_create(name="short", expires_at=timezone.now() + timedelta(seconds=1))
    assert assign(HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200

    # When its expiry passes
    time.sleep(1.1)

    # Then the cached copy does not keep it alive
    assert_not_authenticated(assign(HTTP_AUTHORIZATION=f"Bearer {token}"), detail_contains="expired")


@pytest.mark.parametrize(
    "header",
    ["Bearer {token}", "{token}", "bearer {token}", "BEARER   {token}", "  {token}  "],
    ids=["bearer", "bare", "lowercase-bearer", "uppercase-bearer-spaces", "padded"],
)
def test_auth__authentication_header_forms__accepted(demo_config, proxy_token, header):
    response = assign(HTTP_AUTHENTICATION=header.format(token=proxy_token))

    assert response.status_code == 200
    assert response.json() == {"assignments": {"u1": response.json()["assignments"]["u1"]}}


def test_auth__lowercase_bearer_in_authorization__accepted(demo_config, proxy_token):
    assert assign(HTTP_AUTHORIZATION=f"bearer {proxy_token}").status_code == 200


@pytest.mark.parametrize(
    "header", ["", "   ", "Bearer", "Bearer  "], ids=["empty", "blank", "scheme-only", "scheme+blank"]
)
def test_auth__empty_authentication_header__401(demo_config, proxy_token, header):
    response = assign(HTTP_AUTHENTICATION=header)

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_auth__both_headers__authentication_wins_over_a_valid_authorization(demo_config, proxy_token):
    # Given a valid Bearer token and an unknown token in Authentication
    _, unknown = token_generate()

    response = assign(HTTP_AUTHORIZATION=f"Bearer {proxy_token}", HTTP_AUTHENTICATION=unknown)

    # Then Authentication decides: the request is refused
    assert_not_authenticated(response, detail_contains="not known")


def test_auth__both_headers__authorization_for_another_hop_is_ignored(demo_config, proxy_token):
    # Given the proxy's token in Authentication and someone else's credentials in Authorization
    response = assign(HTTP_AUTHENTICATION=proxy_token, HTTP_AUTHORIZATION="Basic d2FmOnNlY3JldA==")

    assert response.status_code == 200


def test_auth__401_body__never_echoes_the_token(demo_config):
    _, token = api_token_create(name="gone")
    api_token_revoke(name="gone")

    response = assign(HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 401
    assert token not in response.content.decode()
    assert token.partition(".")[2] not in response.content.decode()


@pytest.mark.urls("tests.tokens.urls")
def test_auth__proxy_token_on_admin_only_endpoint__403(db, proxy_token):
    response = Client().get("/test-admin-only", HTTP_AUTHORIZATION=f"Bearer {proxy_token}")

    assert response.status_code == 403
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "permission_denied"
    assert "WWW-Authenticate" not in response


@pytest.mark.urls("tests.tokens.urls")
def test_auth__admin_token_on_admin_only_endpoint__200(db, admin_token):
    response = Client().get("/test-admin-only", HTTP_AUTHENTICATION=admin_token)

    assert response.status_code == 200
    assert response.json() == {"token": "test-admin"}


@pytest.mark.urls("tests.tokens.urls")
def test_auth__no_token_on_admin_only_endpoint__401_not_403(db):
    assert_not_authenticated(Client().get("/test-admin-only"))


@pytest.mark.parametrize("role", [Role.PROXY, Role.ADMIN])
def test_auth__proxy_or_admin_on_assignments__200(demo_config, role):
    _, token = api_token_create(name=f"caller-{role}", role=role)

    assert assign(HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200


def test_auth__client_on_assignments__403(demo_config):
    _, token = api_token_create(name="caller-client", role=Role.CLIENT)

    response = assign(HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 403
    assert response.json()["detail"] == "This endpoint needs a token of role proxy or admin."
