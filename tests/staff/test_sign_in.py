"""Failed sign-ins to the staff console lock out one username from one client address for a while (django-axes)."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

PASSWORD = "correct-horse-battery-staple"
HERE, ELSEWHERE = "10.0.0.1", "10.0.0.2"


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_superuser("alice", "alice@example.com", PASSWORD)


def sign_in(password: str, *, address: str = HERE, username: str = "alice", **headers):
    return Client().post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
        **headers,
    )


def signed_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.wsgi_request.session


def fail_until_locked(address: str = HERE, **headers):
    answers = [sign_in("wrong", address=address, **headers) for _ in range(settings.AXES_FAILURE_LIMIT)]
    assert [answer.status_code for answer in answers[:-1]] == [200] * (settings.AXES_FAILURE_LIMIT - 1)
    return answers[-1]


def test_sign_in__failures_up_to_the_limit__lockout_page_not_an_error(alice):
    locked = fail_until_locked()

    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed sign-ins" in page and "alice" in page
    assert "15 minutes" in page


def test_sign_in__locked_username_and_address__right_password_refused(alice):
    fail_until_locked()

    response = sign_in(PASSWORD)

    assert response.status_code == 429
    assert not signed_in(response)


def test_sign_in__locked_username__other_address_signs_in(alice):
    # Given alice locked out from one address (a stranger guessing her password there)
    fail_until_locked()

    # Then she still signs in from another, and another username is not locked from the first
    assert signed_in(sign_in(PASSWORD, address=ELSEWHERE))
    User.objects.create_superuser("bob", "bob@example.com", PASSWORD)
    assert signed_in(sign_in(PASSWORD, username="bob"))


def test_sign_in__forwarded_for_header__not_taken_as_the_address(alice):
    # The admin is reached on gunicorn directly or through a tunnel: the peer's address is the client's.
    # A header any caller writes would let each guess come from a new "address", or lock out another's.
    answers = [
        sign_in("wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}", HTTP_X_REAL_IP=f"192.0.2.{n}")
        for n in range(settings.AXES_FAILURE_LIMIT)
    ]

    assert answers[-1].status_code == 429
    assert not signed_in(sign_in(PASSWORD, HTTP_X_FORWARDED_FOR=ELSEWHERE))
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {HERE}


def test_sign_in__success_before_the_limit__failures_forgotten(alice):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in("wrong")
    assert signed_in(sign_in(PASSWORD))

    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in("wrong")

    assert signed_in(sign_in(PASSWORD))


@pytest.mark.parametrize("command", [["axes_reset_username", "alice"], ["axes_reset_ip_username", HERE, "alice"]])
def test_axes_reset_command__locked_out__signs_in_again(alice, command):
    fail_until_locked()

    call_command(*command)

    assert signed_in(sign_in(PASSWORD))


def test_api_request__bad_tokens__no_sign_in_attempt_recorded(alice):
    # A flood of bad API tokens is the API's 401, never a staff lockout nor a row per request.
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        response = Client().post(
            "/experiment-assignments", {}, content_type="application/json", HTTP_AUTHORIZATION="Bearer nope"
        )
        assert response.status_code == 401

    assert not AccessAttempt.objects.exists()
