"""Which peers gunicorn (deploy/gunicorn.conf.py) believes when they say a request came over HTTPS, seen
from outside: through Django's HTTPS redirect and HSTS, on a real gunicorn, from loopback, where the proxy
of deploy/proxy/ connects from, but so can any other local process.

The server runs on a SQLite file of its own: Django decides the redirect before any query.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import PROJECT_DIR
from tests.helpers.server import gunicorn, wait_until

pytestmark = pytest.mark.e2e

HSTS_SECONDS = 60
# gunicorn's own default secure_scheme_headers, each with the value that means HTTPS.
SCHEME_HEADERS = [
    {"X-Forwarded-Proto": "https"},
    {"X-Forwarded-Ssl": "on"},
    {"X-Forwarded-Protocol": "ssl"},
]


@contextlib.contextmanager
def service(database: Path, **settings: str) -> Iterator[str]:
    env = {
        "DATABASE_URL": f"sqlite:///{database}",
        "SECRET_KEY": "e2e-forwarded-proto-not-secret",
        "SECURE_SSL_REDIRECT": "true",
        "SECURE_HSTS_SECONDS": str(HSTS_SECONDS),
        "TRUST_X_FORWARDED_PROTO": "false",
        **settings,
    }
    with gunicorn(env=env, workers=1) as (base_url, _):
        wait_until(lambda: httpx.get(f"{base_url}/healthz").status_code == 200, timeout=15)
        yield base_url


def scheme_seen(base_url: str, headers: dict[str, str]) -> str:
    """The scheme Django took the request for: a plain-HTTP request is redirected to https://, an HTTPS
    one is answered, with HSTS."""
    response = httpx.get(f"{base_url}/experiment-assignments", headers=headers)
    if response.status_code == 301:
        assert response.headers["location"].startswith("https://")
        assert "strict-transport-security" not in response.headers
        return "http"
    assert response.headers["strict-transport-security"] == f"max-age={HSTS_SECONDS}"
    return "https"


def test_scheme_headers__not_trusted__none_believed_even_from_loopback(tmp_path):
    # Given the default: TRUST_X_FORWARDED_PROTO off
    with service(tmp_path / "db.sqlite3") as base_url:
        # When a loopback client claims HTTPS in each header gunicorn knows
        seen = [scheme_seen(base_url, headers) for headers in SCHEME_HEADERS]

    # Then every request is still plain HTTP, and redirected
    assert seen == ["http"] * len(SCHEME_HEADERS)


def test_forwarded_proto__trusted__believed_from_the_proxys_address_alone(tmp_path):
    # Given TRUST_X_FORWARDED_PROTO on, the proxy on loopback (the default address)
    with service(tmp_path / "db.sqlite3", TRUST_X_FORWARDED_PROTO="true") as base_url:
        # When the proxy says https, says http, says nothing, or a header it never sets says HTTPS
        https = scheme_seen(base_url, {"X-Forwarded-Proto": "https"})
        http = scheme_seen(base_url, {"X-Forwarded-Proto": "http"})
        silent = scheme_seen(base_url, {})
        others = [scheme_seen(base_url, headers) for headers in SCHEME_HEADERS[1:]]

    # Then only X-Forwarded-Proto: https makes the request HTTPS
    assert https == "https"
    assert [http, silent, *others] == ["http"] * 4


def test_forwarded_proto__trusted_from_another_host__loopback_claim_ignored(tmp_path):
    # Given TRUST_X_FORWARDED_PROTO on, for a proxy at another address
    env = {"TRUST_X_FORWARDED_PROTO": "true", "GUNICORN_FORWARDED_ALLOW_IPS": "192.0.2.10,2001:db8::/32"}
    with service(tmp_path / "db.sqlite3", **env) as base_url:
        # When a loopback client, not that proxy, claims HTTPS
        seen = scheme_seen(base_url, {"X-Forwarded-Proto": "https"})

    # Then it is not believed
    assert seen == "http"


def test_script_name_header__from_the_trusted_proxys_address__ignored(tmp_path):
    # Given TRUST_X_FORWARDED_PROTO on, so loopback is trusted for X-Forwarded-Proto
    with service(tmp_path / "db.sqlite3", TRUST_X_FORWARDED_PROTO="true", SECURE_SSL_REDIRECT="false") as base_url:
        # When a loopback peer says the service is mounted under a prefix
        response = httpx.get(f"{base_url}/elsewhere/healthz", headers={"SCRIPT_NAME": "/elsewhere"})

    # Then the prefix stays part of the path, which names nothing
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("value", ["10.0.0.1/8", "*", "proxy.internal", "127.0.0.1,,::1"])
def test_forwarded_allow_ips__malformed__gunicorn_stops_naming_it(value):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--check-config",
            "--config",
            "deploy/gunicorn.conf.py",
        ],
        cwd=PROJECT_DIR,
        env={**os.environ, "TRUST_X_FORWARDED_PROTO": "true", "GUNICORN_FORWARDED_ALLOW_IPS": value},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "GUNICORN_FORWARDED_ALLOW_IPS must" in result.stderr
