"""Typed readers for environment variables.

Each reader raises ImproperlyConfigured naming the variable, so a typo in a
deployment stops start-up with a message instead of running with a guess.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = {"true", "1", "yes", "on"}
FALSE_WORDS = {"false", "0", "no", "off"}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def env_int(name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise ImproperlyConfigured(f"{name} must be {bounds}, got {value}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def env_list(name: str, default: str) -> list[str]:
    raw = os.environ.get(name, default)
    items = [item.strip() for item in raw.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(f"{name} must be a comma-separated list without empty items, got {raw!r}")
    return items


def env_origins(name: str) -> frozenset[str]:
    """A comma-separated list of web origins (`https://app.example.com`, `http://localhost:3000`), empty by
    default: scheme and host, a port if any, nothing else, as a browser sends them in `Origin`."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return frozenset()
    origins = env_list(name, raw)
    for origin in origins:
        parts = urlsplit(origin)
        try:
            # The port is read to refuse one that is not a number (`https://a:x`).
            well_formed = parts.scheme in ("http", "https") and parts.hostname is not None and parts.port != 0
        except ValueError:
            well_formed = False
        if not well_formed or parts.username or parts.password or parts.path or parts.query or parts.fragment:
            raise ImproperlyConfigured(
                f"{name} must list origins such as https://app.example.com (scheme, host and port only), got {origin!r}"
            )
    # Browsers send the scheme and host in lower case.
    return frozenset(origin.lower() for origin in origins)


def env_networks(name: str, default: str) -> list[str]:
    """A comma-separated list of IP addresses and networks (`10.0.0.0/8`)."""
    items = env_list(name, default)
    for item in items:
        try:
            # strict: 10.0.0.1/8 is a mistake (host bits set), not 10.0.0.0/8.
            ipaddress.ip_network(item)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must list IP addresses or networks, got {item!r}") from None
    return items


def database_from_url(name: str, url: str) -> dict:
    """Django DATABASES entry for a `postgres://` or `sqlite:///` URL."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"{name} has an invalid port: {url!r}") from None
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise ImproperlyConfigured(f"{name} must name a database, got {url!r}")
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": database,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": unquote(parts.hostname or ""),
            "PORT": str(port or ""),
            "OPTIONS": dict(parse_qsl(parts.query)),
        }
    if parts.scheme == "sqlite":
        # sqlite:///relative/path and sqlite:////absolute/path, as dj-database-url reads them.
        path = unquote(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else ""
        if not path:
            raise ImproperlyConfigured(f"{name} must look like sqlite:///path/to/file.sqlite3, got {url!r}")
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path}
    raise ImproperlyConfigured(f"{name} must start with postgres://, postgresql:// or sqlite:///, got {url!r}")


def secret_key(name: str, *, key_file: Path, may_generate: bool) -> str:
    """The secret from the environment, else from key_file, else a new one written there."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if key_file.exists():
        return key_file.read_text().strip()
    if not may_generate:
        raise ImproperlyConfigured(
            f"{name} is required when DEBUG is off and the database is not the embedded SQLite default "
            f"(no {key_file} to read it from)"
        )
    key_file.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(50)
    # O_EXCL: two processes starting at once must not each write a different key.
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return key_file.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    return value
