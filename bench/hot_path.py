"""bench/run hot-path: the service as deployed, beside minimal apps and raw SQL, in one invocation.

Creates a fresh database (or reuses one, --reuse-database), migrates it (on a
Citus coordinator, --citus-workers, then distributes its tables), applies
examples/demo.yaml and bench/hot_path_resources.yaml, creates a proxy token and
stores --seeded assignments (and, for the followLinks scenarios, identifier
links: bench/links.py; for 1000-members, holdout members between runs:
bench/memberships.py); counts SQL statements per request in-process; then, per
scenario and concurrency, runs rounds of the targets on the same PostgreSQL:
raw SQL (psycopg, no HTTP), the minimal app (bench/minimal_app.py, and
bench/minimal_asgi.py) under the service's gunicorn command and on plain gunicorn
sync, gthread and ASGI workers and uvicorn, the service as deployed (`gunicorn -c
deploy/gunicorn.conf.py`), and the service's variants (--service-variant,
--service-at). Prints the tables, the service beside the fastest minimal app among
them, and writes them to bench/results/<name>.md and .json. Exits 1 if any request
failed. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
import sys
from dataclasses import asdict, dataclass
from importlib.metadata import version

import psycopg

from bench.client import request_body
from bench.connections import DEFAULT_MODES
from bench.links import LinkPool, links_outcome, links_seed
from bench.memberships import MemberPool
from bench.report import (
    as_text,
    fastest_minimal_table,
    gates_table,
    gunicorn_used,
    machine,
    main_table,
    results_write,
    runs_table,
    statements_table,
    targets_table,
)
from bench.rounds import (
    ASYNC_TARGETS,
    TARGETS,
    Bench,
    HelpFormatter,
    ServiceTarget,
    bench_prepared,
    seeded_check,
    shared_arguments,
)
from bench.scenarios import ASSIGN, BULK_EXPERIMENT_IDS, BULK_STORED, HEALTHZ, LINK, ONE_SUBJECT, SCENARIOS, Scenario
from bench.seed import COUNTS_NOT_EXACT, table_state
from bench.server import git_worktree
from bench.wrk import WrkUnavailable, supported, wrk_path
from devtools import PROJECT_DIR

# examples/demo.yaml, then banner-copy-nolinks and the 20 user experiments of the POST /assignments scenarios.
CONFIGS = (PROJECT_DIR / "examples" / "demo.yaml", PROJECT_DIR / "bench" / "hot_path_resources.yaml")

EPILOG = """\
scenarios (one request each; new subjects and pairs are new in the database whatever ran before):
{scenarios}
  The 1000-subject scenarios are measured in subjects/s, the others in requests/s.
  raw SQL has no /healthz; the minimal app's answers it without the database, the service's checks it.
  subject-1 and subject-20 name bench-user-01 (to 20) of bench/hot_path_resources.yaml for one new user ID.
  1000-new-links and 1000-new-nolinks send the same kind of batch, new cookies of which 1 in 10 is linked
  through a seeded user to an assigned cookie, to banner-copy (followLinks) and to its copy without.
  *-gated send new users with attributes to bench-gated (targeting, coverage 0.5) or bench-gated-all (the same
  targeting, coverage 1: every one of them enters), each beside its reference (1-new-user, subject-1,
  1000-new-user) without gates; the table "With gates and without" compares them round by round.
  1000-new-layered and 1000-members send new users and users who are holdout members already (bench/memberships.py)
  to bench-layered, in a layer and covered by two holdouts, beside 1000-new-user.
  ofrep-* are OpenFeature evaluations (OFREP), each beside its POST /assignments twin of the same subject,
  experiments and statements: ofrep-1-new and ofrep-1-existing (subject-1-new, subject-1-existing) evaluate
  checkout-button for a new or a seeded user; ofrep-bulk-{bulk} (subject-{bulk}-existing) every user experiment
  listed for bulk evaluation, checkout-button and bench-user-01 to 20, for one of the first {stored:,} seeded users,
  which are stored in all of them before the runs.

The defaults run everything: 3 rounds at 16 and at 64 clients on 1,000,000 seeded
assignments and --linked-users' links, every target, about three and a half hours on 2 cores. A quick look:
  bench/run hot-path --seeded 20000 --duration 3 --warmup 1 --repeat 1 --concurrency 16 --targets minimal,service \\
      --results-name dev
The service against the fastest minimal app on any server (the outside check's comparison):
  bench/run hot-path --load wrk --targets minimal-sync,minimal-gthread,minimal-asgi,minimal-uvicorn,service ...
The service and `minimal` run `gunicorn -c deploy/gunicorn.conf.py` with its defaults except for --workers
and --threads; other GUNICORN_* variables of the environment (GUNICORN_ACCESS_LOG=true, ...) reach them,
and the results name what gunicorn resolved and every target's start command.
Before and after, side by side in one run: the service with gunicorn options added, and from another revision:
  --service-variant python-parser=--http-parser=python   (target service-python-parser)
  --service-at before=HEAD~1                              (target service-before, a git worktree)
Keep the seeded database for the next runs:
  bench/run hot-path --reuse-database ...   (creates it the first time, keeps it, seeds only what it lacks)
On a local Citus cluster's coordinator (the followLinks scenarios' raw SQL does not run there):
  bench/run hot-path --postgres-url postgres://root@127.0.0.1:5800/postgres --citus-workers 2 ...
  bench/run citus   (starts a cluster, runs bench/run on plain PostgreSQL and on Citus, compares them)
""".format(
    scenarios="\n".join(
        f"  {scenario.key:<19} {'GET' if scenario.kind == HEALTHZ else 'POST'} {scenario.path}: {scenario.title}"
        for scenario in SCENARIOS.values()
    ),
    bulk=len(BULK_EXPERIMENT_IDS),
    stored=BULK_STORED,
)


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run hot-path",
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
        "the next ports (bench/run citus starts one): the database is created on every node and distribute_tables "
        "turns it into the distributed layout before seeding; 0: plain PostgreSQL",
    )
    parser.add_argument(
        "--shard-count",
        type=int,
        help="with --citus-workers: distribute_tables --shard-count (default: Citus's, 32)",
    )
    parser.add_argument(
        "--service-variant",
        action="append",
        default=[],
        type=_service_variant,
        metavar="NAME=ARGS",
        help="also run the service with these gunicorn command-line settings added (shell words, after the "
        "config file's: they rank above it) as target service-NAME, with the deployment's connections; "
        "repeatable. E.g. python-parser=--http-parser=python",
    )
    parser.add_argument(
        "--service-at",
        action="append",
        default=[],
        type=_service_at,
        metavar="NAME=REV",
        help="also run the service of git revision REV as target service-NAME: `gunicorn -c "
        "deploy/gunicorn.conf.py` in a detached git worktree of it (removed at the end; the application named when "
        "its config file names none), with this virtualenv, database (the same schema assumed) and token; "
        "repeatable",
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
        connections=list(DEFAULT_MODES),
        count_triggers=["on"],
        repeat=3,
        results_name="latest",
    )
    args = parser.parse_args(argv)
    seeded_check(parser, args)
    if args.targets is None:
        # Every target but, on Citus, the ASGI minimal app, whose async statements have no Citus form.
        args.targets = [target for target in TARGETS if not (args.citus_workers and target in ASYNC_TARGETS)]
    if args.citus_workers and set(args.targets) & set(ASYNC_TARGETS):
        parser.error(f"{', '.join(ASYNC_TARGETS)} do not run on Citus (bench/minimal_asgi.py)")
    names = [name for name, _ in args.service_variant + args.service_at]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        parser.error(f"--service-variant and --service-at: each NAME once ({', '.join(repeated)} repeated)")
    if args.linked_users < 1:
        parser.error("--linked-users must be at least 1")
    if args.citus_workers < 0:
        parser.error("--citus-workers must be 0 or more")
    if args.shard_count is not None and not args.citus_workers:
        parser.error("--shard-count needs --citus-workers: only a Citus cluster has shards")
    if args.load == "wrk":
        unsupported = [key for key in args.scenarios if not supported(SCENARIOS[key])]
        if unsupported:
            parser.error(f"--load wrk cannot make the requests of {', '.join(unsupported)} (attributes or pooled IDs)")
        try:
            wrk_path()
        except WrkUnavailable as error:
            parser.error(str(error))
    return args


_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def _named(raw: str, option: str) -> tuple[str, str]:
    name, equals, value = raw.partition("=")
    if not equals or not _NAME.fullmatch(name) or not value.strip():
        raise argparse.ArgumentTypeError(f"{option}: NAME=VALUE, NAME of a-z, 0-9 and - (got {raw!r})")
    return name, value


def _service_variant(raw: str) -> tuple[str, tuple[str, ...]]:
    name, value = _named(raw, "--service-variant")
    return name, tuple(shlex.split(value))


def _service_at(raw: str) -> tuple[str, str]:
    return _named(raw, "--service-at")


@contextlib.contextmanager
def service_targets(args: argparse.Namespace):
    """The service's variants of --service-variant and --service-at, by target name; the worktrees of the
    revisions exist until the end."""
    with contextlib.ExitStack() as stack:
        services = {
            f"service-{name}": ServiceTarget(name=f"service-{name}", options=options)
            for name, options in args.service_variant
        }
        for name, revision in args.service_at:
            root, commit = stack.enter_context(git_worktree(revision))
            print(f"service-{name}: {revision} ({commit}) in a git worktree at {root}", flush=True)
            services[f"service-{name}"] = ServiceTarget(
                name=f"service-{name}", root=root, revision=revision, commit=commit
            )
        yield services


def main(argv: list[str]) -> int:
    args = arguments(argv)
    with (
        service_targets(args) as services,
        bench_prepared(
            args,
            CONFIGS,
            seeded=args.seeded,
            citus_workers=args.citus_workers,
            shard_count=args.shard_count,
            reuse=args.reuse_database,
        ) as ready,
    ):
        database_url, seed = ready.database_url, ready.seed
        bench = Bench(args, ready.server, database_url, ready.token, workers=ready.citus_workers)
        bench.services = services
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
        if any(scenario.members for scenario in scenarios):
            bench.members = MemberPool(database_url=database_url, prefix=bench.run_id)
        counts = statements_count(scenarios=scenarios, bench=bench)
        runs = bench.rounds()
        with psycopg.connect(database_url, autocommit=True) as connection:
            end = table_state(connection)
            if links is not None:
                links.update(pool_stored=bench.links.stored, pool_taken=bench.links.taken)
                links["outcome"] = links_outcome(connection, prefix=bench.run_id)
            stored_count(connection, runs=runs, prefix=bench.run_id)
        results = {
            "setup": {
                **ready.setup("hot-path", argv),
                "machine": machine(),
                "layout": ready.layout,
                "gunicorn_version": version("gunicorn"),
                "gunicorn": gunicorn_used(runs),
                "workers_option": args.workers,
                "threads_option": args.threads,
                "concurrency": args.concurrency,
                "warmup": args.warmup,
                "duration": args.duration,
                "repeat": args.repeat,
                "targets": args.targets + list(services),
                "services": {
                    name: {"options": list(target.options), "revision": target.revision, "commit": target.commit}
                    for name, target in services.items()
                },
                "connections": args.connections,
                "count_triggers": args.count_triggers,
                "reused_database": ready.reused,
                "seed": seed,
                "links": links,
                "end": end,
            },
            "runs": runs,
            "statements": [asdict(count) for count in counts],
        }
        print("\nRaw SQL, minimal app and service (medians over rounds)\n" + as_text(main_table(runs)))
        if fastest_minimal_table(runs)[1]:
            print(
                "\nThe service and the fastest minimal app on any server (medians over rounds; cpu ms per request)\n"
                + as_text(fastest_minimal_table(runs))
            )
        print("\nEvery target (medians over rounds)\n" + as_text(targets_table(runs)))
        if gates_table(runs)[1]:
            print("\nWith gates and without (medians over rounds)\n" + as_text(gates_table(runs)))
        print("\nEvery run (cpu ms per request: app = gunicorn workers, db = PostgreSQL backends)\n")
        print(as_text(runs_table(runs)))
        if counts:
            print("\nSQL statements per request (in-process)\n" + as_text(statements_table(results["statements"])))
        json_path, markdown_path = results_write(directory=args.results_dir, name=args.results_name, results=results)
        print(f"\nwrote {json_path} and {markdown_path}")
        failed = bench.requests_failed(runs)
        if not end["counts_exact"]:
            print(COUNTS_NOT_EXACT, file=sys.stderr)
        linked_wrong = links is not None and not links["outcome"]["as_expected"]
        if linked_wrong:
            print(
                "the followLinks scenarios stored a source other than expected; see links in the JSON", file=sys.stderr
            )
        return 1 if failed or not end["counts_exact"] or linked_wrong else 0


# The rows each run of a gated scenario and of its reference stored, beside the subjects it sent: the gates
# keep some out, and a gated batch that stores fewer rows does less work than its reference. The subject IDs
# of one run are `<its prefix>-<load worker>-<counter>`.
# The rows stored in an experiment and in the holdouts covering it, by run and load worker: a run's new
# subject IDs are its prefix, the worker's number and a counter of 10 digits, which left(..., -11) drops.
STORED_BY_WORKER = """
SELECT left(a.subject_id, -11), count(*)
FROM assignments_assignment a
WHERE a.experiment_id = ANY(%(experiments)s) AND a.subject_id LIKE %(prefix)s
GROUP BY 1
"""
EXPERIMENT_AND_HOLDOUTS = """
SELECT e.id FROM assignments_experiment e WHERE lower(e.key) = lower(%(experiment)s)
UNION ALL
SELECT h.holdout_id FROM assignments_experimentholdout h
JOIN assignments_experiment e ON e.id = h.experiment_id WHERE lower(e.key) = lower(%(experiment)s)
"""
# The rows stored in an experiment for the pool IDs a run took (bench/pools.py), which are the run's rows: the
# holdout memberships of a pool's IDs were stored by the pool, before the run.
STORED_FROM_POOL = """
SELECT count(*) FROM assignments_assignment a
WHERE a.experiment_id = (SELECT id FROM assignments_experiment WHERE lower(key) = lower(%(experiment)s))
  AND a.subject_id BETWEEN %(first)s AND %(last)s
"""


def stored_count(connection: psycopg.Connection, *, runs: list[dict], prefix: str) -> None:
    """Sets `stored_share` of each run of a scenario in the gates table: the rows it stored (in the experiment and,
    as memberships, in the holdouts covering it) ÷ the subjects it sent, warm-up included."""
    compared = {run["scenario"] for run in runs if run["reference"]} | {run["reference"] for run in runs}
    experiments = {key for scenario in (SCENARIOS[name] for name in compared if name) for key in scenario.named}
    stored: dict[str, int] = {}
    for experiment_id in sorted(experiments):
        pks = [pk for (pk,) in connection.execute(EXPERIMENT_AND_HOLDOUTS, {"experiment": experiment_id})]
        for worker_prefix, count in connection.execute(STORED_BY_WORKER, {"experiments": pks, "prefix": f"{prefix}-%"}):
            run_prefix = worker_prefix.rsplit("-", 1)[0]
            stored[run_prefix] = stored.get(run_prefix, 0) + count
    for run in runs:
        if run["scenario"] not in compared or not run["subjects_sent"]:
            continue
        span = run.get("pool_span")
        if span:
            (count,) = connection.execute(
                STORED_FROM_POOL, {"experiment": SCENARIOS[run["scenario"]].experiment_id, **span}
            ).fetchone()
        else:
            count = stored.get(run["prefix"], 0)
        run["stored_share"] = count / run["subjects_sent"]


# SQL statements per request, counted in-process with Django's CaptureQueriesContext.
#
# Runs the whole Django request stack (middleware, DRF, the view) through the test
# client against the benchmark database, one request per scenario shape after a
# warm-up request has filled the process's caches. Statements sent outside
# Django's cursor wrapper (the CONN_HEALTH_CHECKS `SELECT 1`, /healthz's `SELECT 1`
# on a connection of its own) are not seen here, so /healthz is left out; the
# server-side transaction count of each run covers those.


@dataclass(frozen=True)
class StatementCount:
    scenario: str
    subjects: int
    statements: int
    sql: list[str]


# What Django's query log holds for the statements of transaction.atomic(), which no cursor runs.
_TRANSACTION = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})

_TABLE = re.compile(r'\b(?:FROM|JOIN|INTO|UPDATE)\s+(?!LATERAL\b)"?(\w+)"?(?!\w|\()', re.IGNORECASE)
# The names a WITH clause gives its parts (`walk(start_type, ...) AS (`), which are not tables.
_CTE = re.compile(r"\b(\w+)\s*(?:\([\w\s,]*\))?\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.IGNORECASE)


def statement_summary(sql: str) -> str:
    """`SELECT tokens_apitoken`: the statement's verb and the tables it names (`WITH RECURSIVE` for a recursive
    statement, whose verb comes after its parts)."""
    words = sql.split()
    if words[0].upper() == "COPY":
        # COPY names its table first, and then FROM STDIN, which is not one.
        return f"COPY {words[1]}"
    verb = " ".join(words[:2]).upper() if len(words) > 1 and words[1].upper() == "RECURSIVE" else words[0].upper()
    ctes = set(_CTE.findall(sql)) if verb.startswith("WITH") else set()
    tables = [table for table in dict.fromkeys(_TABLE.findall(sql)) if table not in ctes]
    return " ".join([verb, "+".join(tables)]).strip()


def statements_count(*, scenarios: list[Scenario], bench: Bench) -> list[StatementCount]:
    """One count per scenario that sends statements through Django, with the subject IDs the bench's runs send."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {bench.token}", "HTTP_HOST": "127.0.0.1"}

    def post(scenario: Scenario, ids: list[str]) -> None:
        body = request_body(scenario, ids)
        response = client.post(scenario.path, body, content_type="application/json", **headers)
        if response.status_code != 200:
            raise RuntimeError(f"statement count: HTTP {response.status_code}: {response.content[:300]!r}")

    counts = []
    for scenario in scenarios:
        if scenario.kind not in (ASSIGN, LINK, *ONE_SUBJECT):
            continue
        texts: list[str] = []

        def record(execute, sql, params, many, context, texts=texts):
            texts.append(sql)
            return execute(sql, params, many, context)

        with bench.pooled(scenario):
            ids = bench.subject_ids(scenario, f"{bench.run_id}-count-{scenario.key}", 0)
            post(scenario, ids.next_batch())
            with connection.execute_wrapper(record), CaptureQueriesContext(connection) as captured:
                post(scenario, ids.next_batch())
        # The log has no text for a prepared statement (core/database.py): take it as the cursor got it. A COPY
        # passes by the execute wrappers, and the log has its text.
        cursor_texts = iter(texts)
        sql = [
            query["sql"] if query["sql"] in _TRANSACTION or query["sql"].startswith("COPY ") else next(cursor_texts)
            for query in captured
        ]
        counts.append(
            StatementCount(
                scenario=scenario.key,
                subjects=scenario.subjects,
                statements=len(sql),
                sql=[statement_summary(text) for text in sql],
            )
        )
    return counts


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
