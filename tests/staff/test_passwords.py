"""Staff passwords follow Django's four validators (at least 12 characters), however the account is made."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

STRONG = "correct-horse-battery-staple"


def test_admin_add_user__weak_password__refused_nothing_created(admin_client):
    response = admin_client.post(
        "/admin/auth/user/add/",
        {"username": "bob", "usable_password": "true", "password1": "1", "password2": "1"},
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "at least 12 characters" in page and "entirely numeric" in page
    assert not User.objects.filter(username="bob").exists()


@pytest.mark.parametrize("weak", ["1", "123456789012", "password1234", "ops@example.com"])
def test_createsuperuser_noinput__weak_password_in_environment__refused_nothing_created(db, monkeypatch, weak):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", weak)

    with pytest.raises(CommandError, match="DJANGO_SUPERUSER_PASSWORD"):
        call_command("createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com")

    assert not User.objects.exists()


def test_createsuperuser_noinput__strong_password_in_environment__created(db, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", STRONG)

    call_command("createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com")

    assert User.objects.get(username="ops").check_password(STRONG)


def test_createsuperuser_noinput__no_password__created_without_a_usable_one(db, monkeypatch):
    # As Django's own: the account exists, and cannot sign in until `changepassword` gives it a password.
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD", raising=False)

    call_command("createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com")

    assert not User.objects.get(username="ops").has_usable_password()
