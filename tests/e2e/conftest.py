"""The service on a private PostgreSQL cluster (devtools/cluster.py), for the end-to-end tests that stop its
database: migrated, configured with the demo configuration, and a proxy token to call it with; and where
the servers' logs go (tests/helpers/server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.cluster import Cluster, ClusterUnavailable, private_cluster
from tests.helpers import server
from tests.helpers.processes import manage_output
from tests.helpers.resources import DEMO_YAML

SECRET_KEY = "e2e-private-cluster-not-secret"


@pytest.fixture(scope="session", autouse=True)
def gunicorn_logs(tmp_path_factory) -> Iterator[None]:
    """The servers' logs in pytest's basetemp rather than in the checkout's var/."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server, "LOG_DIR", tmp_path_factory.mktemp("gunicorn"))
        yield


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A started cluster with an empty database `service`, its URL in DATABASE_URL of service_env."""
    try:
        with private_cluster(prefix="e2e-cluster-") as cluster:
            cluster.create_database("service")
            yield cluster
    except ClusterUnavailable as unavailable:
        pytest.skip(str(unavailable))


@pytest.fixture(scope="module")
def service_env(cluster, tmp_path_factory) -> dict[str, str]:
    """The environment of a migrated, configured service on the cluster."""
    env = {"DATABASE_URL": cluster.url("service"), "SECRET_KEY": SECRET_KEY}
    manage_output("migrate", "--no-input", env=env)
    config = tmp_path_factory.mktemp("config") / "config.yaml"
    config.write_text(DEMO_YAML)
    manage_output("apply_resources", str(config), env=env)
    return env


@pytest.fixture(scope="module")
def proxy_token(service_env) -> str:
    output = manage_output(
        "shell",
        "-c",
        "from tokens.services import api_token_create; print(api_token_create(name='e2e-outage', role='proxy')[1])",
        env=service_env,
    )
    return output.strip().splitlines()[-1]
