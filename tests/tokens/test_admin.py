"""Token management in the Django admin: the token is shown once, never stored, revoked through the service."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tokens.models import ApiToken, Role
from tokens.selectors import api_token_find
from tokens.services import api_token_create

TOKEN_IN_PAGE = re.compile(r"[0-9a-f]{12}\.[A-Za-z0-9_-]{43}")


@pytest.fixture
def staff(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", "pw"))
    return client


def test_admin_add__valid__token_shown_once_and_it_works(staff):
    # When staff create a token
    response = staff.post(
        "/admin/tokens/apitoken/add/", {"name": "backend", "role": "admin", "expires_at_0": "", "expires_at_1": ""}
    )

    # Then they land on the list, where the message shows the token, which authenticates
    assert response.status_code == 302
    page = staff.get(response["Location"]).content.decode()
    shown = TOKEN_IN_PAGE.findall(page)
    assert len(shown) == 1
    api_token = api_token_find(token=shown[0])
    assert (api_token.name, api_token.role) == ("backend", Role.ADMIN)

    # And no later page shows it again
    assert shown[0] not in staff.get("/admin/tokens/apitoken/").content.decode()
    assert shown[0] not in staff.get(f"/admin/tokens/apitoken/{api_token.pk}/change/").content.decode()


def test_admin_add__live_name_taken__form_error_nothing_created(staff):
    api_token_create(name="backend")

    response = staff.post("/admin/tokens/apitoken/add/", {"name": "backend", "role": "proxy"})

    assert response.status_code == 200
    assert "exists already" in response.content.decode()
    assert ApiToken.objects.count() == 1


def test_admin_add__invalid_name__form_error(staff):
    response = staff.post("/admin/tokens/apitoken/add/", {"name": "has space", "role": "proxy"})

    assert response.status_code == 200
    assert "invalid token name" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_admin_change_page__read_only_no_secret(staff):
    api_token, token = api_token_create(name="backend")

    page = staff.get(f"/admin/tokens/apitoken/{api_token.pk}/change/").content.decode()

    assert api_token.prefix in page and api_token.secret_hash in page
    assert token.partition(".")[2] not in page
    assert 'name="name"' not in page
    assert staff.post(f"/admin/tokens/apitoken/{api_token.pk}/change/", {"name": "x"}).status_code == 403
    assert staff.post(f"/admin/tokens/apitoken/{api_token.pk}/delete/", {"post": "yes"}).status_code == 403


def test_admin_revoke_action__selected_tokens__revoked_through_the_service(staff, demo_config):
    # Given two tokens, one already used (and so cached by this process)
    first, first_token = api_token_create(name="first")
    second, _ = api_token_create(name="second")
    kept, _ = api_token_create(name="kept")
    assert (
        Client()
        .post(
            "/experiment-assignments",
            {"experiment_id": "checkout-button", "subject_ids": ["u1"]},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {first_token}",
        )
        .status_code
        == 200
    )

    # When staff revoke both
    response = staff.post(
        "/admin/tokens/apitoken/",
        {"action": "revoke_selected", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )

    # Then both are revoked, the other is not, and the cached one stops working at once
    assert "Revoked 2 token(s)." in response.content.decode()
    assert [t.name for t in ApiToken.objects.filter(revoked_at__isnull=False).order_by("name")] == ["first", "second"]
    assert ApiToken.objects.get(pk=kept.pk).revoked_at is None
    refused = Client().post(
        "/experiment-assignments",
        {"experiment_id": "checkout-button", "subject_ids": ["u1"]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {first_token}",
    )
    assert refused.status_code == 401
