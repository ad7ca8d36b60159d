"""The service deployed afresh for one reliability experiment, the way an operator deploys it.

The database is prepared with the commands docs/how-to/deploy.md gives (manage.py
migrate, apply_resources examples/demo.yaml, create_api_token), each in its own
process with the experiment's DATABASE_URL, so no Django settings are fixed in
the benchmark's process and each experiment can use another database. The
servers are bench/server.py's: `gunicorn -c deploy/gunicorn.conf.py`, waited for until every worker has booted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.server import gunicorn
from devtools import PROJECT_DIR
from devtools.gunicorn import Gunicorn, GunicornSettings, gunicorn_settings

DEMO_CONFIG = PROJECT_DIR / "examples" / "demo.yaml"


def service_env(*, database_url: str, secret_key: str, **gunicorn_variables: str) -> dict[str, str]:
    """The deployment's environment (README) on database_url; GUNICORN_* variables of the caller's
    environment pass through unless given here."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "SECRET_KEY": secret_key,
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        **gunicorn_variables,
    }


def manage(*args: str, env: dict[str, str]) -> str:
    """`manage.py <args>`'s standard output; raises with its error output if it fails."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def service_prepare(env: dict[str, str]) -> str:
    """Migrate the empty database, apply the demo configuration and create a proxy token; returns the token."""
    manage("migrate", "--no-input", env=env)
    manage("apply_resources", str(DEMO_CONFIG), env=env)
    # The command prints the token alone on its last line.
    return manage("create_api_token", "--name", "bench", "--role", "proxy", env=env).strip().splitlines()[-1]


@dataclass
class Fleet:
    """Independent gunicorn servers of the service, as separate hosts would run them."""

    servers: list[Gunicorn]
    settings: GunicornSettings

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(server.host, server.port) for server in self.servers]


@contextlib.contextmanager
def gunicorns(count: int, *, env: dict[str, str], log_path: Path) -> Iterator[Fleet]:
    """`count` servers of the service on free ports, their output appended to log_path; stopped at the end."""
    settings = gunicorn_settings(env=env)
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(gunicorn(app=None, env=env, settings=settings, log_path=log_path)) for _ in range(count)
        ]
        yield Fleet(servers=servers, settings=settings)
