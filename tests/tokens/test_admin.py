"""Token management in the Django admin: the token is shown once, never stored, revoked through the service."""

from __future__ import annotations

import base64
import re
import zlib

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tokens.models import ApiToken, Role
from tokens.selectors import api_token_find
from tokens.services import api_token_create

TOKEN_IN_PAGE = re.compile(r"[0-9a-f]{12}\.[A-Za-z0-9_-]{43}")


@pytest.fixture
def staff(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", password=None))
    return client


@pytest.fixture
def staff_with(db):
    """A client signed in as staff who hold only the given permissions of the tokens app."""

    def sign_in(*codenames: str) -> Client:
        user = User.objects.create_user(f"staff-{len(codenames)}-{'-'.join(codenames)}", is_staff=True)
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="tokens", codename__in=["view_apitoken", *codenames])
        )
        client = Client()
        client.force_login(user)
        return client

    return sign_in


def test_admin_add__valid__token_shown_once_on_the_response_and_it_works(staff):
    # When staff create a token
    response = staff.post(
        "/admin/tokens/apitoken/add/", {"name": "backend", "role": "admin", "expires_at_0": "", "expires_at_1": ""}
    )

    # Then the answer itself shows the token once, uncached, and the token authenticates
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    shown = TOKEN_IN_PAGE.findall(response.content.decode())
    assert len(shown) == 1
    api_token = api_token_find(token=shown[0])
    assert (api_token.name, api_token.role) == ("backend", Role.ADMIN)

    # And no later page shows it again
    assert shown[0] not in staff.get("/admin/tokens/apitoken/").content.decode()
    assert shown[0] not in staff.get(f"/admin/tokens/apitoken/{api_token.pk}/change/").content.decode()


def test_admin_add__valid__token_in_no_cookie_nor_session(staff):
    # Given staff who create a token, then browse on as after any add
    created = staff.post("/admin/tokens/apitoken/add/", {"name": "backend", "role": "proxy"})
    later = [staff.get("/admin/tokens/apitoken/"), staff.get("/admin/")]

    # Then no response set a cookie holding a token (the messages cookie is signed but readable),
    # and the session holds none either
    for response in [created, *later]:
        for cookie in response.cookies.values():
            assert not TOKEN_IN_PAGE.search(cookie.value)
            assert not TOKEN_IN_PAGE.search(_unsigned(cookie.value))
    assert not TOKEN_IN_PAGE.search(str(dict(staff.session)))


def _unsigned(value: str) -> str:
    """A signed cookie's payload, as anyone who reads the cookie can (base64, maybe zlib)."""
    payload = value.partition(":")[0].strip('"')
    compressed = payload.startswith(".")
    raw = base64.urlsafe_b64decode(payload.lstrip(".") + "=" * (-len(payload.lstrip(".")) % 4))
    return (zlib.decompress(raw) if compressed else raw).decode(errors="replace")


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


def test_admin_add__without_admin_role_permission__admin_role_not_offered_and_refused(staff_with):
    staff = staff_with("add_apitoken")

    form = staff.get("/admin/tokens/apitoken/add/").content.decode()
    refused = staff.post("/admin/tokens/apitoken/add/", {"name": "backend", "role": "admin"})

    assert '<option value="proxy"' in form and '<option value="admin"' not in form
    assert refused.status_code == 200
    assert "needs the permission" in refused.content.decode()
    assert not TOKEN_IN_PAGE.search(refused.content.decode())
    assert not ApiToken.objects.exists()


def test_admin_add__without_admin_role_permission__client_role_token_created(staff_with):
    staff = staff_with("add_apitoken")

    form = staff.get("/admin/tokens/apitoken/add/").content.decode()
    created = staff.post("/admin/tokens/apitoken/add/", {"name": "web-app", "role": "client"})

    assert '<option value="client"' in form
    assert api_token_find(token=TOKEN_IN_PAGE.findall(created.content.decode())[0]).role == Role.CLIENT


def test_admin_add__with_admin_role_permission__admin_role_token_created(staff_with):
    staff = staff_with("add_apitoken", "manage_admin_role_apitoken")

    form = staff.get("/admin/tokens/apitoken/add/").content.decode()
    created = staff.post("/admin/tokens/apitoken/add/", {"name": "backend", "role": "admin"})

    assert '<option value="admin"' in form
    assert api_token_find(token=TOKEN_IN_PAGE.findall(created.content.decode())[0]).role == Role.ADMIN


def test_admin_revoke_action__admin_role_token_without_admin_role_permission__nothing_revoked(staff_with):
    # Given staff who may revoke, but not manage admin-role tokens
    staff = staff_with("change_apitoken")
    proxy, _ = api_token_create(name="proxy", role=Role.PROXY)
    admin, _ = api_token_create(name="admin", role=Role.ADMIN)

    # When they revoke both
    response = staff.post(
        "/admin/tokens/apitoken/",
        {"action": "revoke_selected", "_selected_action": [proxy.pk, admin.pk]},
        follow=True,
    )

    # Then the action is refused as a whole, saying why
    assert "needs the permission" in response.content.decode()
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()


def test_admin_revoke_action__admin_role_token_with_admin_role_permission__revoked(staff_with):
    staff = staff_with("change_apitoken", "manage_admin_role_apitoken")
    admin, _ = api_token_create(name="admin", role=Role.ADMIN)

    response = staff.post(
        "/admin/tokens/apitoken/", {"action": "revoke_selected", "_selected_action": [admin.pk]}, follow=True
    )

    assert "Revoked 1 token(s)." in response.content.decode()
    assert ApiToken.objects.get(pk=admin.pk).revoked_at is not None


def test_admin_revoke_action__proxy_tokens_without_admin_role_permission__revoked(staff_with):
    staff = staff_with("change_apitoken")
    proxy, _ = api_token_create(name="proxy", role=Role.PROXY)

    response = staff.post(
        "/admin/tokens/apitoken/", {"action": "revoke_selected", "_selected_action": [proxy.pk]}, follow=True
    )

    assert "Revoked 1 token(s)." in response.content.decode()
