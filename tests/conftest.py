from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from hypothesis import settings as hypothesis_settings

from assignments.configuring import Actor, resources_apply
from assignments.distribution import citus_version
from assignments.resources import resources_parse
from core.cache import caches_clear
from core.healthz import database_probe, probe_connection
from tests.server import free_port
from tokens.models import Role
from tokens.services import api_token_create

# CI runs the property tests with a fixed seed, so a landing is never blocked by a new random
# find; local runs explore (and hypothesis replays what they found from .hypothesis/).
hypothesis_settings.register_profile("ci", derandomize=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

DEMO_YAML = """
schemaVersion: 1
kind: subjecttype
metadata: {id: user}
---
schemaVersion: 1
kind: subjecttype
metadata: {id: cookie}
---
schemaVersion: 1
kind: experiment
metadata: {id: checkout-button, status: active}
spec:
  subjectType: user
  variants:
    - {id: control, control: true, split: 0.5}
    - {id: green, split: 0.5}
"""


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.postgres` tests need PostgreSQL; on SQLite they are skipped.
    `@pytest.mark.single_node` tests are skipped on Citus (scripts/test-citus sets TEST_CITUS)."""
    from django.conf import settings

    if os.environ.get("TEST_CITUS") == "1":
        for item in items:
            marker = item.get_closest_marker("single_node")
            if marker is not None:
                item.add_marker(pytest.mark.skip(reason=f"single-node PostgreSQL only: {marker.args[0]}"))
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL=postgres://...)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "postgres: needs PostgreSQL; skipped on SQLite")
    config.addinivalue_line("markers", "e2e: starts real server processes")
    config.addinivalue_line("markers", "single_node(reason): by nature about one PostgreSQL server; skipped on Citus")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, migrated; on a Citus coordinator also distributed, as an operator would."""
    with django_db_blocker.unblock():
        if citus_version() is not None:
            call_command("distribute_tables", stdout=io.StringIO())


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Each test sees the database, not a state or a token cached by an earlier test."""
    caches_clear()
    yield
    caches_clear()


def apply_yaml(text: str, *, dry_run: bool = False):
    return resources_apply(specs=resources_parse(text, file="test.yaml"), actor=Actor.command(), dry_run=dry_run)


@pytest.fixture
def demo_config(db):
    """The subject types `user` and `cookie` and the active experiment `checkout-button` (50/50)."""
    apply_yaml(DEMO_YAML)


class ApiClient:
    """HTTP calls through Django's full request stack, with a token."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.client = Client()

    def headers(self, token: str | None) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def post(self, path: str, body: Any, *, token: str | None = None, **extra):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        extra.setdefault("content_type", "application/json")
        return self.client.post(path, data, **self.headers(token or self.token), **extra)

    def get(self, path: str, *, token: str | None = None, **extra):
        return self.client.get(path, **self.headers(token or self.token), **extra)


@pytest.fixture
def proxy_token(db) -> str:
    return api_token_create(name="test-proxy", role=Role.PROXY)[1]


@pytest.fixture
def admin_token(db) -> str:
    return api_token_create(name="test-admin", role=Role.ADMIN)[1]


@pytest.fixture
def api(proxy_token) -> ApiClient:
    """A client holding a `proxy` token, the role product backends use."""
    return ApiClient(proxy_token)


@pytest.fixture
def anonymous_api(db) -> ApiClient:
    return ApiClient(None)


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"


@contextlib.contextmanager
def database_unreachable():
    """Point the default database at an address where nothing answers, for outage tests without mocks.

    PostgreSQL gets a port nobody listens on (connections are refused), SQLite a
    path in a missing directory. Only new connections are affected: a PostgreSQL
    test closes the open connection first to make the service reconnect (so it
    needs django_db(transaction=True)); SQLite's in-memory test database keeps
    its one connection whatever the settings say. The health probe's kept
    connection is closed here, as an outage would break it, and its last
    success forgotten, as the outage would outlast it.
    """
    probe_connection.close()
    database_probe.forget()
    settings_dict = connection.settings_dict
    saved = {key: settings_dict[key] for key in ("NAME", "HOST", "PORT")}
    if connection.vendor == "postgresql":
        settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    else:
        settings_dict["NAME"] = str(Path(tempfile.gettempdir()) / f"missing-{uuid.uuid4().hex}" / "db.sqlite3")
    try:
        yield
    finally:
        settings_dict.update(saved)
