"""Production settings: `manage.py check --deploy`, and the transport-security switches (docs/how-to/deploy.md)."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings

from config.wsgi import served_application
from tests.helpers.api import ApiClient
from tests.helpers.processes import PRODUCTION_ENV, TLS_ENV, check_deploy


def test_check_deploy__production_defaults__passes_leaving_only_the_tls_decisions():
    result = check_deploy(PRODUCTION_ENV)

    assert result.returncode == 0, result.stderr
    assert set(re.findall(r"\((\w+\.[WE]\d+)\)", result.stderr)) == {"security.W004", "security.W008"}


def test_check_deploy__production_behind_tls__no_issue_at_all():
    result = check_deploy({**PRODUCTION_ENV, **TLS_ENV}, "--fail-level", "WARNING")

    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize(
    ("name", "value"),
    [("SECURE_HSTS_SECONDS", "a year"), ("SECURE_SSL_REDIRECT", "maybe"), ("SESSION_COOKIE_SECURE", "yes please")],
)
def test_check_deploy__malformed_security_variable__start_up_stops_naming_it(name, value):
    result = check_deploy({**PRODUCTION_ENV, name: value})

    assert result.returncode != 0
    assert name in result.stderr


@override_settings(SECURE_SSL_REDIRECT=True)
def test_ssl_redirect__plain_http__api_redirected_healthz_answered(db):
    # An application made as config.wsgi makes it, under the changed setting.
    served = ApiClient(None, app=served_application())

    assert served.get("/healthz").status_code == 200
    assert served.post("/experiment-assignments", {}).status_code == 301


# gunicorn, not Django, decides whether a request came over HTTPS (tests/e2e/test_forwarded_proto.py).
@override_settings(SECURE_SSL_REDIRECT=True, SECURE_HSTS_SECONDS=3600)
def test_ssl_redirect__https__no_redirect_and_hsts(db):
    response = Client().get("/api/schema", secure=True)

    assert response.status_code == 200
    assert response["Strict-Transport-Security"] == "max-age=3600"


def test_cookies__production_defaults__secure(settings):
    assert settings.SESSION_COOKIE_SECURE is True
    assert settings.CSRF_COOKIE_SECURE is True
    assert not hasattr(settings, "SECURE_PROXY_SSL_HEADER") or settings.SECURE_PROXY_SSL_HEADER is None
