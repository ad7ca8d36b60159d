"""The one set-up every hot-path benchmark starts with (hot-path, admin, metrics, and citus through hot-path).

Create the database (or reuse it), on a Citus coordinator on every node;
point this process's Django at it; migrate (and distribute the tables on
Citus), apply the configuration files and create the proxy token `bench`
in-process; store the seeded assignments (and, for the scenarios that ask for it, the first
seeded subjects in more experiments). At the end drop the database unless
it is to be kept. The reliability experiments prepare theirs as an operator
would, with manage.py in processes of their own (bench/reliability/deployment.py), and the
commands benchmark loads its rows in bulk per size (bench/commands.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.citus import CitusCluster
from bench.database import DatabaseServer
from bench.report import command_recorded, git_commit
from bench.seed import assignments_seed, stored_seed


@dataclass
class Prepared:
    started_at: datetime
    commit: str
    server: DatabaseServer
    citus: CitusCluster | None
    database_url: str
    reused: bool
    token: str
    seed: dict[str, Any] | None

    @property
    def layout(self) -> str:
        return self.citus.layout() if self.citus else "PostgreSQL, one server"

    @property
    def citus_workers(self) -> Sequence[DatabaseServer]:
        return self.citus.workers if self.citus else ()

    def setup(self, benchmark: str, argv: Sequence[str]) -> dict[str, Any]:
        """What every benchmark's results record of how they were made; each adds its own options."""
        import django

        return {
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "command": command_recorded(["bench/run", benchmark, *argv]),
            "postgresql": self.server.version(),
            "python": platform.python_version(),
            "django": django.get_version(),
            "commit": self.commit,
        }


def django_prepare(*configs: Path, distribute: bool = False, shard_count: int | None = None) -> str:
    """Migrate, with `distribute` turn the tables into the Citus layout (distribute_tables, in `shard_count`
    shards or Citus's default), apply the configuration files and (re)create the proxy token `bench` in this
    process; returns the token."""
    import django
    from django.core.management import call_command

    django.setup()
    from tokens.services import api_token_replace

    call_command("migrate", verbosity=0)
    if distribute:
        call_command("distribute_tables", shard_count=shard_count, stdout=io.StringIO())
    call_command("apply_resources", *map(str, configs), stdout=io.StringIO())
    return api_token_replace(name="bench", role="proxy")[1]


@contextlib.contextmanager
def prepared(
    *,
    postgres_url: str,
    database: str,
    configs: Sequence[Path],
    seeded: int = 0,
    citus_workers: int = 0,
    shard_count: int | None = None,
    reuse: bool = False,
    keep: bool = False,
    stored_in: Sequence[str] = (),
    stored_count: int = 0,
) -> Iterator[Prepared]:
    """The database `database` beside postgres_url, migrated, configured, `seeded` assignments stored (0:
    none) and the first `stored_count` of those subjects (at most `seeded`) in the experiments `stored_in`
    too; reused (and kept) if `reuse` and it exists; dropped at the end unless keep or reuse."""
    started_at = datetime.now(UTC)
    # Before Django imports the code measured: the checkout may move on while a long run goes.
    commit = git_commit()
    server = DatabaseServer(postgres_url)
    citus = CitusCluster(server, citus_workers) if citus_workers else None
    try:
        reused = reuse and server.exists(database)
        recreate = citus.recreate if citus else server.recreate
        database_url = server.url(database) if reused else recreate(database)
        os.environ.update(
            DATABASE_URL=database_url,
            DJANGO_SETTINGS_MODULE="config.settings",
            DEBUG="false",
            SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        )
        layout = citus.layout() if citus else "PostgreSQL, one server"
        what = "reusing" if reused else "created"
        names = ", ".join(config.name for config in configs)
        print(f"database {database} ({what}), {layout}: migrating, applying {names}", flush=True)
        token = django_prepare(*configs, distribute=citus is not None, shard_count=shard_count)
        seed = None
        if seeded:
            print(f"seeding up to {seeded:,} assigned subjects", flush=True)
            seed = assignments_seed(database_url=database_url, count=seeded)
            print(
                f"  {seed['copied']:,} stored in {seed['seconds']:.1f} s (COPY {seed['copy_seconds']:.1f} s); "
                f"{seed['assignments']:,} assignments in the table",
                flush=True,
            )
            if stored_in and stored_count:
                count = min(seeded, stored_count)
                print(f"seeding the first {count:,} of them in {len(stored_in)} more experiments", flush=True)
                seed["stored"] = stored_seed(database_url=database_url, count=count, experiment_ids=stored_in)
                print(
                    f"  {seed['stored']['copied']:,} stored in {seed['stored']['seconds']:.1f} s; "
                    f"{seed['stored']['assignments']:,} assignments in the table",
                    flush=True,
                )
        yield Prepared(
            started_at=started_at,
            commit=commit,
            server=server,
            citus=citus,
            database_url=database_url,
            reused=reused,
            token=token,
            seed=seed,
        )
    finally:
        if not (keep or reuse):
            # WITH (FORCE) also ends this process's own Django connection, if one is open.
            server.drop(database)
        server.close()
        if citus:
            citus.close()
