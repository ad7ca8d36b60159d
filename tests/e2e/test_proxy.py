"""The authenticating reverse proxy (deploy/proxy/) in front of real gunicorn, through real nginx.

nginx is installed from Debian's packages when missing (deploy/proxy/install-nginx).
In CI (REQUIRE_POSTGRES=1) a missing nginx fails the test; elsewhere it is skipped.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.ports import free_port, wait_for_port
from devtools.processes import process_stop
from tests.helpers import PROJECT_DIR
from tests.helpers.api import assert_problem
from tests.helpers.observability import request_lines
from tests.helpers.resources import DEMO_YAML, apply_yaml
from tests.helpers.server import database_url_for_tests, gunicorn, gunicorn_log, tool_missing, wait_until
from tokens.crypto import token_generate
from tokens.models import Role
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-proxy-not-secret"
ASSIGN = {"experiment_id": "checkout-button", "subject_ids": ["u-1", "u-2"]}
LINK = {"identifiers": [{"subject_type": "cookie", "subject_id": "c-1"}, {"subject_type": "user", "subject_id": "u-1"}]}
# OpenFeature's evaluations (PROXY_ENABLE_OFREP), and the web origin the service answers CORS for.
OFREP_BULK = "/ofrep/v1/evaluate/flags"
OFREP_FLAG = f"{OFREP_BULK}/checkout-button"
OFREP_CONTEXT = {"context": {"targetingKey": "u-1", "subjectType": "user"}}
ORIGIN = "https://app.example.com"


def nginx_binary() -> str:
    def found() -> str | None:
        return shutil.which("nginx") or next((path for path in ("/usr/sbin/nginx",) if os.access(path, os.X_OK)), None)

    if found():
        return found()
    install = subprocess.run(
        [str(PROJECT_DIR / "deploy/proxy/install-nginx")], capture_output=True, text=True, timeout=900
    )
    if found():
        return found()
    tool_missing(f"nginx is missing and could not be installed: {install.stderr[-2000:]}")


@contextlib.contextmanager
def nginx(*, upstream: str, token: str, **settings: str) -> Iterator[tuple[httpx.Client, Path]]:
    """Render the template with PROXY_* settings and run nginx in the foreground; yields (a client of it, prefix)."""
    binary = nginx_binary()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="proxy-e2e-") as prefix:
        # nginx's workers run as `nobody` when the master is root: they must reach the prefix.
        os.chmod(prefix, 0o755)
        config = Path(prefix) / "nginx.conf"
        env = {
            **os.environ,
            "PROXY_API_TOKEN": token,
            "PROXY_UPSTREAM": upstream,
            "PROXY_LISTEN": f"127.0.0.1:{port}",
            "PROXY_ERROR_LOG": "error.log",
            "PROXY_ACCESS_LOG": "access.log",
            "PROXY_WORKER_PROCESSES": "1",
            **settings,
        }
        render = subprocess.run(
            [str(PROJECT_DIR / "deploy/proxy/render"), str(config)], env=env, capture_output=True, text=True
        )
        assert render.returncode == 0, render.stderr
        assert oct(config.stat().st_mode & 0o777) == "0o600"
        check = subprocess.run([binary, "-t", "-p", prefix, "-c", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        process = subprocess.Popen(
            [binary, "-p", prefix, "-c", str(config), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
                yield http, Path(prefix)
        finally:
            process_stop(process)


@pytest.fixture
def service() -> Iterator[tuple[str, str, Path]]:
    """gunicorn on the test database with the demo configuration; yields (base URL, proxy token, log path)."""
    apply_yaml(DEMO_YAML)
    _, token = api_token_create(name="proxy")
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": SECRET_KEY, "OFREP_CORS_ALLOWED_ORIGINS": ORIGIN}
    with gunicorn(env=env, workers=2) as (base_url, _):
        wait_until(lambda: httpx.get(f"{base_url}/healthz").status_code == 200, timeout=15)
        yield base_url, token, gunicorn_log(base_url)


def established_connections_to(port: int) -> int:
    """Open TCP connections to 127.0.0.1:port, from /proc (state 01 = ESTABLISHED)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if state == "01" and remote == f"0100007F:{port:04X}":
            count += 1
    return count


def test_proxy__default_paths__token_injected_other_paths_404_body_capped(service):
    base_url, token, gunicorn_log = service
    upstream = base_url.removeprefix("http://")
    with nginx(upstream=upstream, token=token, PROXY_MAX_BODY_SIZE="64k") as (http, prefix):
        # An assignment without any client token succeeds: the proxy adds its own
        assigned = http.post("/experiment-assignments", json=ASSIGN)
        assert assigned.status_code == 200
        assert set(assigned.json()["assignments"]) == {"u-1", "u-2"}
        assert http.post("/experiment-assignments/", json=ASSIGN).json() == assigned.json()

        # A client's own credentials, bad ones in both headers, are dropped, not passed on
        _, bogus = token_generate()
        spoofed = http.post(
            "/experiment-assignments",
            json=ASSIGN,
            headers={"Authorization": f"Bearer {bogus}", "Authentication": bogus, "X-Forwarded-For": "203.0.113.9"},
        )
        assert spoofed.json() == assigned.json()

        # The health check is public; the admin, the schema and /id-link are not there at all
        assert http.get("/healthz").json() == {"status": "ok", "database": "ok"}
        for path in ("/admin/", "/admin/login/", "/id-link", "/api/schema", "/", "/admin/../id-link"):
            assert_problem(http.get(path), status=404, code="not_found")
        assert_problem(http.post("/id-link", json=LINK), status=404, code="not_found")
        # OpenFeature's evaluations are off by default, their preflights too
        for path in (OFREP_BULK, f"{OFREP_BULK}/", OFREP_FLAG, f"{OFREP_FLAG}/"):
            assert_problem(http.post(path, json=OFREP_CONTEXT), status=404, code="not_found")
            preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
            assert_problem(http.options(path, headers=preflight), status=404, code="not_found")

        # A body over the proxy's cap (64 KiB here, below the service's own 1 MiB) is refused by the proxy
        oversize = http.post(
            "/experiment-assignments",
            content=b'{"x": "' + b"a" * 70_000 + b'"}',
            headers={"Content-Type": "application/json"},
        )
        assert_problem(oversize, status=413, code="payload_too_large")

        # Upstream connections are kept alive between requests
        for _ in range(5):
            assert http.get("/healthz").status_code == 200
        assert established_connections_to(int(upstream.rsplit(":", 1)[1])) >= 1
        access_log = (prefix / "access.log").read_text()

    # Calling gunicorn directly, without the proxy and its token, is refused
    direct = httpx.post(f"{base_url}/experiment-assignments", json=ASSIGN)
    assert_problem(direct, status=401, code="not_authenticated")
    assert direct.headers["www-authenticate"] == "Bearer"

    # The service saw the proxy's X-Forwarded-For (the client address), not the client's claim
    log = gunicorn_log.read_text()
    assert "xff=127.0.0.1 " in log
    assert "203.0.113.9" not in log
    # Neither log holds the token
    for text in (log, access_log):
        assert token not in text and token.partition(".")[2] not in text


def test_proxy__metrics__never_forwarded_even_with_an_admin_token(service):
    # Given a scraper's admin token, which the service itself accepts for /metrics
    base_url, token, _ = service
    _, admin_token = api_token_create(name="scraper", role=Role.ADMIN)
    admin = {"Authorization": f"Bearer {admin_token}"}
    assert httpx.get(f"{base_url}/metrics", headers=admin).status_code == 200

    # When /metrics is asked through the proxy, in any spelling, with that token or none
    with nginx(upstream=base_url.removeprefix("http://"), token=token, PROXY_ENABLE_ID_LINK="true") as (http, _):
        answers = [
            http.get(path, headers=headers)
            for path in ("/metrics", "/metrics/", "//metrics", "/./metrics", "/healthz/../metrics")
            for headers in ({}, admin, {"Authentication": admin_token})
        ]

    # Then the proxy has no such path
    for answer in answers:
        assert_problem(answer, status=404, code="not_found")
        assert b"http_requests" not in answer.content


def test_proxy__request_id__the_clients_kept_or_the_proxys_forwarded_and_logged_on_both_sides(service):
    base_url, token, gunicorn_log = service
    body = {"experiment_id": "checkout-button", "subject_ids": ["u-7"]}
    with nginx(upstream=base_url.removeprefix("http://"), token=token) as (http, prefix):
        # When a client sends an ID, sends none, sends one the service would not keep, and asks for a missing path
        kept = http.post("/experiment-assignments", json=body, headers={"X-Request-ID": "client-trace-1"})
        made = http.post("/experiment-assignments", json=body)
        replaced = http.post("/experiment-assignments", json=body, headers={"X-Request-ID": "bad id"})
        missing = http.get("/admin/", headers={"X-Request-ID": "client-trace-2"})
        wait_until(lambda: "client-trace-2" in (prefix / "access.log").read_text(), timeout=5)
        access_log = (prefix / "access.log").read_text()

    # Then the client's is kept; otherwise the proxy makes one, which the service keeps
    assert kept.headers["x-request-id"] == "client-trace-1"
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])
    assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["x-request-id"])
    # And the proxy's own problems carry it too
    assert_problem(missing, status=404, code="not_found")
    assert missing.json()["request_id"] == missing.headers["x-request-id"] == "client-trace-2"
    # And both logs name each request by the same ID
    wait_until(lambda: made.headers["x-request-id"] in gunicorn_log.read_text(), timeout=5)
    service_ids = {line["request_id"] for line in request_lines(gunicorn_log.read_text())}
    for answer in (kept, made, replaced):
        request_id = answer.headers["x-request-id"]
        assert request_id in service_ids
        assert f"request_id={request_id}" in access_log
    assert "request_id=client-trace-2" in access_log


def test_proxy__id_link_enabled__reaches_the_service_admin_still_404(service):
    base_url, token, _ = service
    with nginx(upstream=base_url.removeprefix("http://"), token=token, PROXY_ENABLE_ID_LINK="true") as (http, _):
        linked = http.post("/id-link", json=LINK)
        assert linked.status_code == 200
        assert linked.json() == {"success": True}
        assert http.post("/id-link/", json=LINK).json() == {"success": True}
        assert http.post("/experiment-assignments", json=ASSIGN).status_code == 200
        assert_problem(http.get("/admin/"), status=404, code="not_found")


def cors_headers(response: httpx.Response) -> dict[str, str]:
    """An answer's CORS headers and its Vary."""
    return {
        name: value for name, value in response.headers.items() if name.startswith("access-control-") or name == "vary"
    }


def test_proxy__ofrep_enabled__evaluations_validators_and_cors_as_the_service_answers(service):
    base_url, token, gunicorn_log = service
    direct = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"})
    preflight = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    _, bogus = token_generate()
    with direct, nginx(upstream=base_url.removeprefix("http://"), token=token, PROXY_ENABLE_OFREP="true") as (http, _):
        # A single evaluation, with or without a trailing slash and whatever credentials the caller sends,
        # answers the service's body
        single = http.post(
            OFREP_FLAG, json=OFREP_CONTEXT, headers={"Authorization": f"Bearer {bogus}", "X-API-Key": bogus}
        )
        assert single.status_code == 200
        assert single.json()["key"] == "checkout-button"
        assert single.json()["reason"] == "SPLIT"
        assert single.content == http.post(f"{OFREP_FLAG}/", json=OFREP_CONTEXT).content
        assert single.content == direct.post(OFREP_FLAG, json=OFREP_CONTEXT).content

        # A bulk one too, with the service's validator
        bulk = http.post(OFREP_BULK, json=OFREP_CONTEXT)
        from_service = direct.post(OFREP_BULK, json=OFREP_CONTEXT)
        assert bulk.status_code == 200
        assert [flag["key"] for flag in bulk.json()["flags"]] == ["checkout-button"]
        assert bulk.content == from_service.content == http.post(f"{OFREP_BULK}/", json=OFREP_CONTEXT).content
        tag = bulk.headers["etag"]
        assert tag == from_service.headers["etag"]
        assert bulk.headers["cache-control"] == "private, no-cache"

        # If-None-Match reaches the service: its 304 (logged below as the service's) with the ETag, or a 200
        not_modified = http.post(
            OFREP_BULK, json=OFREP_CONTEXT, headers={"If-None-Match": tag, "X-Request-ID": "ofrep-not-modified"}
        )
        assert not_modified.status_code == 304
        assert not_modified.content == b""
        assert not_modified.headers["etag"] == tag
        assert http.post(OFREP_BULK, json=OFREP_CONTEXT, headers={"If-None-Match": '"other"'}).status_code == 200

        # A preflight is forwarded and answered by the service, without a token; CORS headers and Vary unchanged
        for path in (OFREP_BULK, OFREP_FLAG):
            through, straight = http.options(path, headers=preflight), httpx.options(base_url + path, headers=preflight)
            assert through.status_code == straight.status_code == 204
            assert through.headers["access-control-allow-origin"] == ORIGIN
            assert cors_headers(through) == cors_headers(straight)
        from_origin = http.post(OFREP_BULK, json=OFREP_CONTEXT, headers={"Origin": ORIGIN})
        assert from_origin.headers["access-control-expose-headers"] == "ETag"
        assert "Origin" in from_origin.headers["vary"]
        assert cors_headers(from_origin) == cors_headers(
            direct.post(OFREP_BULK, json=OFREP_CONTEXT, headers={"Origin": ORIGIN})
        )

        # The service's refusals keep OFREP's members; what is not one key segment is the proxy's plain 404
        unknown = http.post(f"{OFREP_BULK}/no-such-flag", json=OFREP_CONTEXT)
        assert assert_problem(unknown, status=404, code="experiment_not_found")["errorCode"] == "FLAG_NOT_FOUND"
        for path in (
            f"{OFREP_BULK}/a/b",
            f"{OFREP_BULK}/a%2Fb",
            f"{OFREP_FLAG}/extra",
            f"{OFREP_BULK}/-a",
            "/ofrep/v1/evaluate",
        ):
            assert "errorCode" not in assert_problem(http.post(path, json=OFREP_CONTEXT), status=404, code="not_found")
        assert_problem(http.get("/admin/"), status=404, code="not_found")

    # The 304 was the service's own
    wait_until(lambda: "ofrep-not-modified" in gunicorn_log.read_text(), timeout=5)
    [logged] = [line for line in request_lines(gunicorn_log.read_text()) if line["request_id"] == "ofrep-not-modified"]
    assert (logged["path"], logged["status"]) == (OFREP_BULK, 304)


def test_proxy__client_role_token__ofrep_answered_assignments_403(service):
    # Given a proxy whose token has the least privilege OpenFeature's evaluations need
    base_url, _, gunicorn_log = service
    _, client_token = api_token_create(name="ofrep-client", role=Role.CLIENT)
    with nginx(upstream=base_url.removeprefix("http://"), token=client_token, PROXY_ENABLE_OFREP="true") as (http, _):
        single = http.post(OFREP_FLAG, json=OFREP_CONTEXT)
        bulk = http.post(OFREP_BULK, json=OFREP_CONTEXT)
        assigned = http.post("/experiment-assignments", json=ASSIGN)
        health = http.get("/healthz")

    # Then the evaluations are answered, with that token; the assignment endpoint refuses it
    assert single.status_code == bulk.status_code == health.status_code == 200
    assert_problem(assigned, status=403, code="permission_denied")
    wait_until(lambda: "/experiment-assignments" in gunicorn_log.read_text(), timeout=5)
    names = {line["path"]: line.get("token_name") for line in request_lines(gunicorn_log.read_text())}
    assert names[OFREP_FLAG] == names[OFREP_BULK] == "ofrep-client"


def test_proxy__burst_beyond_the_rate_limit__429_problem_json(service):
    base_url, token, _ = service
    with nginx(
        upstream=base_url.removeprefix("http://"), token=token, PROXY_RATE_LIMIT="5r/s", PROXY_RATE_BURST="5"
    ) as (http, _):
        # When one client sends 30 requests back to back, more than the burst of 5 allows
        started = time.monotonic()
        responses = [http.post("/experiment-assignments", json=ASSIGN) for _ in range(30)]
        elapsed = time.monotonic() - started

    # Then the first one and the burst are served; beyond what 5 r/s refills meanwhile, the rest
    # is refused as rate_limited, with Retry-After
    statuses = [response.status_code for response in responses]
    assert statuses[:6] == [200] * 6
    limited = [response for response in responses if response.status_code == 429]
    assert len(limited) >= 30 - 6 - math.ceil(5 * elapsed)
    assert limited
    assert set(statuses) == {200, 429}
    for response in limited:
        assert_problem(response, status=429, code="rate_limited")
        assert response.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    "headers",
    [{"X-Big": "a" * 10_000}, {f"X-Many-{number}": "a" * 7_000 for number in range(5)}],
    ids=["one-header-over-the-buffer", "header-block-over-the-buffers"],
)
def test_proxy__headers_too_large__400_problem_json_from_the_proxy(service, headers):
    base_url, token, _ = service
    with nginx(upstream=base_url.removeprefix("http://"), token=token) as (http, _):
        response = http.post("/experiment-assignments", json=ASSIGN, headers=headers)

    assert_problem(response, status=400, code="invalid_request")


def test_proxy__service_down__503_problem_json():
    # Given a proxy whose upstream nobody listens on
    _, token = token_generate()
    with nginx(upstream=f"127.0.0.1:{free_port()}", token=token) as (http, _):
        response = http.post("/experiment-assignments", json=ASSIGN)

    assert_problem(response, status=503, code="internal_error")
    assert response.headers["retry-after"] == "5"
