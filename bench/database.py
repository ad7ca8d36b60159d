"""The benchmark's own PostgreSQL database, and what the server tells about it."""

from __future__ import annotations

import argparse
import os
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.cpu import parent_of


def postgres_url_argument(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """--postgres-url: a maintenance database of the server the benchmark uses, env BENCH_POSTGRES_URL."""
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://root@127.0.0.1:5432/postgres"),
        help=help_text,
    )


def database_url_with_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


class DatabaseServer:
    """An autocommit connection to a maintenance database, to create, watch and drop the bench database.

    It never connects to the bench database itself, so its own statements do
    not count in that database's transaction counter.
    """

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.connection = psycopg.connect(admin_url, autocommit=True)

    def close(self) -> None:
        self.connection.close()

    def version(self) -> str:
        return self.connection.execute("SHOW server_version").fetchone()[0]

    def postmaster_pid(self) -> int | None:
        """The parent of every backend, which reaps them (None if the server is not on this machine)."""
        (backend,) = self.connection.execute("SELECT pg_backend_pid()").fetchone()
        return parent_of(backend)

    def exists(self, name: str) -> bool:
        return self.connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None

    def url(self, name: str) -> str:
        return database_url_with_name(self.admin_url, name)

    def recreate(self, name: str) -> str:
        """Drop and create database `name`; returns its URL."""
        self.drop(name)
        self.connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop(self, name: str) -> None:
        self.connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def backend_pids(self, name: str) -> list[int]:
        rows = self.connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [name]
        ).fetchall()
        return [pid for (pid,) in rows]

    def transactions(self, name: str) -> int:
        """Committed plus rolled-back transactions in database `name` so far.

        In autocommit every statement is its own transaction, so the difference
        over a run counts the statements clients sent. A backend flushes its
        counts when it exits, so read this only once its clients disconnected.
        """
        self.connection.execute("SELECT pg_stat_clear_snapshot()")
        row = self.connection.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
        return int(row[0])

    def client_pids(self, name: str) -> list[int]:
        """The backends of client connections to database `name`.

        On a Citus node a maintenance daemon and its internal connections stay
        in every database with the extension: they are not clients, and never go.
        """
        rows = self.connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend' AND application_name NOT LIKE 'citus_internal%%'",
            [name],
        ).fetchall()
        return [pid for (pid,) in rows]

    def wait_without_clients(self, name: str, *, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while self.client_pids(name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"clients of database {name} still connected after {timeout}s")
            time.sleep(0.05)
