"""A staff form refused by the CSRF check says why, and names cookies marked Secure over plain HTTP as the
likely cause (a script's sign-in to the demo over http://)."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.fixture
def script_client() -> Client:
    # A script keeps no cookie marked Secure over plain HTTP: the sign-in form comes back without one.
    return Client(enforce_csrf_checks=True)


def test_csrf_failure__no_cookie_over_plain_http_with_secure_cookies__reason_and_the_secure_hint(
    db, script_client, settings
):
    settings.CSRF_COOKIE_SECURE = settings.SESSION_COOKIE_SECURE = True

    response = script_client.post("/admin/login/", {"username": "alice", "password": "x"})

    assert response.status_code == 403
    page = response.content.decode()
    assert "CSRF cookie not set." in page
    assert "CSRF_COOKIE_SECURE, SESSION_COOKIE_SECURE on" in page
    assert "scripts (curl, python-requests) do not" in page


def test_csrf_failure__cookies_not_secure__reason_without_the_secure_hint(db, script_client, settings):
    settings.CSRF_COOKIE_SECURE = settings.SESSION_COOKIE_SECURE = False

    response = script_client.post("/admin/login/", {"username": "alice", "password": "x"})

    assert response.status_code == 403
    page = response.content.decode()
    assert "CSRF cookie not set." in page
    assert "marks its cookies Secure" not in page


def test_csrf_failure__over_https__no_plain_http_hint(db, script_client, settings):
    settings.CSRF_COOKIE_SECURE = settings.SESSION_COOKIE_SECURE = True

    response = script_client.post("/admin/login/", {"username": "alice", "password": "x"}, secure=True)

    assert response.status_code == 403
    assert "marks its cookies Secure" not in response.content.decode()
