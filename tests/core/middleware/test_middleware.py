"""Which middleware runs for whom: the staff console's session, user and messages are not the API's."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

BODY = {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}


@pytest.mark.parametrize("path", ["/experiment-assignments", "/experiment-assignments/"])
def test_api_request__session_user_and_messages__not_made(api, demo_config, path):
    response = api.post(path, BODY)

    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers
    assert "Cookie" not in response.headers.get("Vary", "")


def test_staff_page__session_user_and_messages__made(admin_client):
    response = admin_client.get("/admin/")

    assert response.status_code == 200
    request = response.wsgi_request
    assert request.user.is_staff
    assert hasattr(request, "session")
    assert hasattr(request, "_messages")


def test_page_next_to_an_api_path__staff_middleware_runs(admin_client):
    # Only the API's own paths pass the middleware by, not every path that starts like one.
    response = admin_client.get("/experiment-assignments-report")

    assert response.status_code == 404
    assert hasattr(response.wsgi_request, "session")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_staff_page__kept_connection_ended__page_answers_on_a_new_one(admin_client):
    # Given: a signed-in staff member, and the process's kept connection ended since
    assert admin_client.get("/admin/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])

    # When
    response = admin_client.get("/admin/")

    # Then: ConnectionCheckMiddleware replaced it before the page needed it
    assert response.status_code == 200
