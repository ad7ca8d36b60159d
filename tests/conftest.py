"""Fixtures and pytest hooks only; what tests share besides fixtures is in tests/helpers/."""

from __future__ import annotations

import io
import os

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from hypothesis import settings as hypothesis_settings

from assignments.models import Experiment
from core.cache import caches_clear
from core.citus import citus_version
from tests.helpers.api import ApiClient, connection_cleanup_held
from tests.helpers.assignments import assigned_store
from tests.helpers.resources import DEMO_RESOURCES, apply_resources, holdout, subject_type
from tokens.models import Role
from tokens.services import api_token_create

# CI runs the property tests with a fixed seed, so a landing is never blocked by a new random
# find; local runs explore (and hypothesis replays what they found from .hypothesis/).
hypothesis_settings.register_profile("ci", derandomize=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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


@pytest.fixture
def in_test_transaction():
    """For requests a test makes straight to a WSGI application (tests.helpers.api.connection_cleanup_held)."""
    with connection_cleanup_held():
        yield


@pytest.fixture
def demo_config(db):
    """The subject types `user` and `cookie` and the active experiment `checkout-button` (50/50)."""
    apply_resources(*DEMO_RESOURCES)


@pytest.fixture
def holdout_members(db) -> Experiment:
    """The active holdout `h1` on users (5 % held out), with `u1` and `u3` held out and `u2` in general, stored
    as requests would have."""
    apply_resources(subject_type("user"), holdout("h1"))
    for subject_id, variant in [("u1", "held_out"), ("u2", "general"), ("u3", "held_out")]:
        assigned_store("h1", subject_id, variant)
    return Experiment.objects.get(key="h1")


@pytest.fixture
def staff_client(client, db):
    """The test client signed in as the superuser `alice`, as staff use the staff console."""
    client.force_login(User.objects.create_superuser("alice", "alice@example.com", password=None))
    return client


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
