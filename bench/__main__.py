"""bench/run: the service as deployed, beside a minimal WSGI app and raw SQL, in one invocation.

Creates a fresh database (or reuses one, --reuse-database), migrates it (on a
Citus coordinator, --citus-workers, then distributes its tables), applies
examples/demo.yaml and bench/hot_path_resources.yaml, creates a proxy token and
stores --seeded assignments (and, for the followLinks scenarios, identifier
links: bench/links.py); counts
SQL statements per request in-process; then, per scenario and concurrency, runs
rounds of three targets on the same PostgreSQL: raw SQL (psycopg, no HTTP), the
minimal app (bench/minimal_app.py) and the service, both served by
`gunicorn -c deploy/gunicorn.conf.py` as deployed. Prints the tables and writes
them to bench/results/<name>.md and .json. Exits 1 if any request failed. See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from importlib.metadata import version

import psycopg

from bench.citus import CitusCluster
from bench.client import PATHS
from bench.connections import DEFAULT_MODES
from bench.database import DatabaseServer
from bench.hot_path import TARGETS, Bench, HelpFormatter, django_prepare, shared_arguments
from bench.links import LinkPool, links_outcome, links_seed
from bench.machine import machine
from bench.profile import py_spy_path
from bench.report import as_text, git_commit, gunicorn_used, main_table, results_write, runs_table, statements_table
from bench.scenarios import HEALTHZ, SCENARIOS
from bench.seed import assignments_seed, table_state
from bench.server import PROJECT_DIR
from bench.statements import statements_count

DEMO_CONFIG = PROJECT_DIR / "examples" / "demo.yaml"
# banner-copy-nolinks and the 20 user experiments of the POST /assignments scenarios.
BENCH_CONFIG = PROJECT_DIR / "bench" / "hot_path_resources.yaml"

EPILOG = """\
scenarios (one request each; new subjects and pairs are new in the database whatever ran before):
{scenarios}
  The 1000-subject scenarios are measured in subjects/s, the others in requests/s.
  raw SQL has no /healthz; the minimal app's answers it without the database, the service's checks it.
  subject-* name bench-user-01 (to 20) of bench/hot_path_resources.yaml for one new user ID.
  1000-new-links and 1000-new-nolinks send the same kind of batch, new cookies of which 1 in 10 is linked
  through a seeded user to an assigned cookie, to banner-copy (followLinks) and to its copy without.

The defaults run everything: 3 rounds at 16 and at 64 clients on 1,000,000 seeded
assignments and --linked-users' links, about an hour on 2 cores. A quick look:
  bench/run --seeded 20000 --duration 3 --warmup 1 --repeat 1 --concurrency 16 --results-name dev
Both HTTP targets run `gunicorn -c deploy/gunicorn.conf.py` with its defaults except for --workers and
--threads; other GUNICORN_* variables of the environment (GUNICORN_ACCESS_LOG=true, ...) reach them,
and the results name what gunicorn resolved.
Keep the seeded database for the next runs:
  bench/run --reuse-database ...   (creates it the first time, keeps it, seeds only what it lacks)
On a local Citus cluster's coordinator (the followLinks scenarios' raw SQL does not run there):
  bench/run --postgres-url postgres://root@127.0.0.1:5800/postgres --citus-workers 2 ...
  bench/citus   (starts a cluster, runs bench/run on plain PostgreSQL and on Citus, compares them)
""".format(
    scenarios="\n".join(
        f"  {scenario.key:<17} {'GET' if scenario.kind == HEALTHZ else 'POST'} {PATHS[scenario.kind]}: {scenario.title}"
        for scenario in SCENARIOS.values()
    )
)


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    shared_arguments(parser)
    parser.add_argument(
        "--seeded",
        type=int,
        default=1_000_000,
        help="assignments stored before measuring; the *-existing scenarios draw from them",
    )
    parser.add_argument(
        "--linked-users",
        type=int,
        default=150_000,
        help="seeded users each linked to two cookies (one in ten shared with the next user), the first one "
        "assigned in banner-copy and banner-copy-nolinks, for the *-links scenarios (bench/links.py)",
    )
    parser.add_argument(
        "--citus-workers",
        type=int,
        default=0,
        help="the server at --postgres-url is the coordinator of a local Citus cluster with this many workers on "
        "the next ports (bench/citus starts one): the database is created on every node and distribute_tables "
        "turns it into the distributed layout before seeding; 0: plain PostgreSQL",
    )
    parser.add_argument(
        "--reuse-database",
        action="store_true",
        help="use the database if it exists (seeding only the subjects it lacks) and keep it at the end",
    )
    parser.set_defaults(
        database="bench_assignments",
        duration=10.0,
        concurrency=[16, 64],
        scenarios=list(SCENARIOS),
        targets=list(TARGETS),
        connections=list(DEFAULT_MODES),
        count_triggers=["on"],
        repeat=3,
        results_name="latest",
    )
    args = parser.parse_args(argv)
    if args.seeded < 1000:
        parser.error("--seeded must be at least 1000: the 1000-existing scenario samples that many")
    if args.linked_users < 1:
        parser.error("--linked-users must be at least 1")
    if args.citus_workers < 0:
        parser.error("--citus-workers must be 0 or more")
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.profile:
        py_spy_path()
    started_at = datetime.now(UTC)
    # Before Django imports the code measured: the checkout may move on while a long run goes.
    commit = git_commit()
    server = DatabaseServer(args.postgres_url)
    citus = CitusCluster(server, args.citus_workers) if args.citus_workers else None
    layout = citus.layout() if citus else "PostgreSQL, one server"
    reused = args.reuse_database and server.exists(args.database)
    recreate = citus.recreate if citus else server.recreate
    database_url = server.url(args.database) if reused else recreate(args.database)
    os.environ.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="config.settings",
        DEBUG="false",
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    )
    try:
        what = "reusing" if reused else "created"
        configs = f"{DEMO_CONFIG.name}, {BENCH_CONFIG.name}"
        print(f"database {args.database} ({what}), {layout}: migrating, applying {configs}", flush=True)
        token = django_prepare(DEMO_CONFIG, BENCH_CONFIG, distribute=citus is not None)
        print(f"seeding up to {args.seeded:,} assigned subjects", flush=True)
        seed = assignments_seed(database_url=database_url, count=args.seeded)
        print(
            f"  {seed['copied']:,} stored in {seed['seconds']:.1f} s (COPY {seed['copy_seconds']:.1f} s); "
            f"{seed['assignments']:,} assignments in the table",
            flush=True,
        )
        bench = Bench(args, server, database_url, token, workers=citus.workers if citus else ())
        scenarios = [SCENARIOS[key] for key in args.scenarios]
        links = None
        if any(scenario.linked_every for scenario in scenarios):
            print(f"seeding identifier links for {args.linked_users:,} users", flush=True)
            links = links_seed(database_url=database_url, users=args.linked_users)
            print(
                f"  {links['links']:,} links, {links['assigned_cookies']:,} assigned cookies in each cookie "
                f"experiment ({'stored' if links['seeded'] else 'found'} in {links['seconds']:.1f} s)",
                flush=True,
            )
            bench.links = LinkPool(database_url=database_url, prefix=bench.run_id, users=args.linked_users)
        counts = statements_count(scenarios=scenarios, token=token, seeded=args.seeded, prefix=bench.run_id)
        runs = bench.rounds()
        with psycopg.connect(database_url, autocommit=True) as connection:
            end = table_state(connection)
            if links is not None:
                links.update(pool_stored=bench.links.stored, pool_taken=bench.links.taken)
                links["outcome"] = links_outcome(connection, prefix=bench.run_id)
        import django

        results = {
            "setup": {
                "started_at": started_at.isoformat(timespec="seconds"),
                "command": " ".join(["bench/run", *argv]),
                "machine": machine(),
                "postgresql": server.version(),
                "layout": layout,
                "python": platform.python_version(),
                "django": django.get_version(),
                "gunicorn_version": version("gunicorn"),
                "gunicorn": gunicorn_used(runs),
                "commit": commit,
                "workers_option": args.workers,
                "threads_option": args.threads,
                "concurrency": args.concurrency,
                "warmup": args.warmup,
                "duration": args.duration,
                "repeat": args.repeat,
                "targets": args.targets,
                "connections": args.connections,
                "count_triggers": args.count_triggers,
                "reused_database": reused,
                "seed": seed,
                "links": links,
                "end": end,
            },
            "runs": runs,
            "statements": [asdict(count) for count in counts],
        }
        print("\nRaw SQL, minimal app and service (medians over rounds)\n" + as_text(main_table(runs)))
        print("\nEvery run (cpu ms per request: app = gunicorn workers, db = PostgreSQL backends)\n")
        print(as_text(runs_table(runs)))
        if counts:
            print("\nSQL statements per request (in-process)\n" + as_text(statements_table(results["statements"])))
        json_path, markdown_path = results_write(directory=args.results_dir, name=args.results_name, results=results)
        print(f"\nwrote {json_path} and {markdown_path}")
        failed = sum(run["errors"] for run in runs)
        if failed:
            print(f"{failed} requests failed; see first_error above and {bench.log_path}", file=sys.stderr)
        if not end["counts_exact"]:
            print("assignments_assignmentcount does not add up to the assignments", file=sys.stderr)
        linked_wrong = links is not None and not links["outcome"]["as_expected"]
        if linked_wrong:
            print(
                "the followLinks scenarios stored a source other than expected; see links in the JSON", file=sys.stderr
            )
        return 1 if failed or not end["counts_exact"] or linked_wrong else 0
    finally:
        if not (args.keep_database or args.reuse_database):
            # WITH (FORCE) also ends this process's own Django connection, if one is open.
            server.drop(args.database)
        server.close()
        if citus:
            citus.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
