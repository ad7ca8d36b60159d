"""bench/run framework: what each layer of the service costs a small request, measured in one process.

The service's WSGI application (config.wsgi, as gunicorn runs it), variants of it
built without some of its middleware, and the minimal app (bench/minimal_app.py)
are called in turn, request by request, with no HTTP server in between, on one
prepared database (as bench/run hot-path prepares it). Each call's thread CPU
time is recorded. Taking turns puts every variant through the same drift of a
shared machine, and thread CPU leaves out the waits for PostgreSQL, whose own
CPU is the same for all of them (they send the same statements). A variant's
median set against the whole service's is what the layers it lacks cost; the
minimal app's is the floor of a Python service sending those statements.

What it leaves out, and bench/run hot-path --load wrk measures: the HTTP
server's parsing and writing, its threads' handing over of connections, and the
GIL shared by a worker's threads. A layer's cost here is its cost per request
there; a server's is not.

The service's log lines go to var/bench-framework.log, as a deployment's go to
a file or a pipe. Prometheus counts in a directory of its own, as under gunicorn.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.client import request_body
from bench.database import postgres_url_argument
from bench.hot_path import CONFIGS
from bench.preparation import prepared
from bench.report import as_markdown, as_text, command_recorded, machine, results_files_write
from bench.scenarios import ASSIGN, HEALTHZ, PATHS, SCENARIOS, SUBJECT, SubjectIds
from devtools import PROJECT_DIR

LOG_PATH = PROJECT_DIR / "var" / "bench-framework.log"
SMALL = ("1-existing", "1-new", "subject-1", "id-link", "healthz")
# The calls each variant makes before measuring: imports, caches and prepared statements warmed.
WARMUP_CALLS = 100
# The slowest calls of a variant (a garbage collection, a page fault) are left out of its trimmed mean.
TRIMMED = 0.05

# Variants of the service: a label, and the substrings of the MIDDLEWARE entries it is built without (all
# requests through one handler, as ONE_CHAIN).
WITHOUT = {
    "without the request log line": ("core.middleware.requestlog",),
    "without the request metrics": ("core.observability.requestmetrics",),
    "without Django's security, common, CSRF and framing": (
        "django.middleware.security",
        "django.middleware.common",
        "django.middleware.csrf",
        "django.middleware.clickjacking",
    ),
    "without the staff console's (sessions, users, messages, axes, static files)": (
        "core.middleware.staffonly",
        "axes.middleware",
        "whitenoise.middleware",
    ),
    "without any middleware": ("",),
}
SERVICE = "service (config.wsgi)"
# Django's handler alone, every request through settings.MIDDLEWARE to the URLconf's DRF views: the service
# without its edge (core/edge). /healthz has no route there: the edge alone answers it.
ONE_CHAIN = "every request through every middleware"
OWN_WORK = "the service's own functions alone (no Django handler, DRF or middleware)"
MINIMAL = "minimal app"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run framework",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    postgres_url_argument(parser, "the PostgreSQL server's maintenance database (env BENCH_POSTGRES_URL)")
    parser.add_argument("--database", default="bench_framework", help="the database to create (and drop at the end)")
    parser.add_argument("--reuse-database", action="store_true", help="use the database if it exists, and keep it")
    parser.add_argument("--seeded", type=int, default=100_000, help="assignments stored before measuring")
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per variant and scenario")
    parser.add_argument(
        "--scenarios",
        type=lambda value: value.split(","),
        default=list(SMALL),
        help=f"comma-separated, from {', '.join(SMALL)} (default: all)",
    )
    parser.add_argument("--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results")
    parser.add_argument("--results-name", default="framework")
    args = parser.parse_args(argv)
    unknown = [key for key in args.scenarios if key not in SMALL]
    if unknown:
        parser.error(f"unknown scenarios {', '.join(unknown)}: choose from {', '.join(SMALL)}")
    if args.calls < 100:
        parser.error("--calls must be at least 100")
    if args.seeded < 1:
        parser.error("--seeded must be at least 1: 1-existing asks for stored subjects")
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    # Before prometheus_client is imported: it picks where it counts then.
    with tempfile.TemporaryDirectory(prefix="bench-framework-") as directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        with prepared(
            postgres_url=args.postgres_url,
            database=args.database,
            configs=CONFIGS,
            seeded=args.seeded,
            reuse=args.reuse_database,
            keep=args.reuse_database,
        ) as ready:
            os.environ["BENCH_TOKEN"] = ready.token
            apps = _applications()
            results = []
            with _log_to(LOG_PATH):
                for key in args.scenarios:
                    results.extend(_measure(apps, key, token=ready.token, seeded=args.seeded, calls=args.calls))
            data = {
                "command": command_recorded(["bench/run", "framework", *argv]),
                "commit": ready.commit,
                "started_at": ready.started_at.isoformat(),
                "machine": machine(),
                "python": sys.version.split()[0],
                "results": results,
            }
    table = _table(results)
    print(as_text(table))
    json_path, markdown_path = results_files_write(
        directory=args.results_dir, name=args.results_name, data=data, markdown=_markdown(data, table)
    )
    print(f"\nwrote {json_path} and {markdown_path}")
    return 0


def _applications() -> dict[str, tuple[WsgiApp, bool]]:
    """Every variant, by label, and whether it answers /healthz: the service first, the minimal app last.
    /healthz is answered by the edge, which only the service has."""
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler

    from config.wsgi import application
    from core.api.chunked import with_chunked_bodies

    apps: dict[str, tuple[WsgiApp, bool]] = {SERVICE: (application, True)}
    chunked = {"limit": lambda: settings.DATA_UPLOAD_MAX_MEMORY_SIZE}
    apps[ONE_CHAIN] = (with_chunked_bodies(WSGIHandler(), **chunked), False)
    complete = settings.MIDDLEWARE
    for label, left_out in WITHOUT.items():
        settings.MIDDLEWARE = [entry for entry in complete if not any(part in entry for part in left_out)]
        try:
            handler = WSGIHandler()
        finally:
            settings.MIDDLEWARE = complete
        apps[label] = (with_chunked_bodies(handler, **chunked), False)
    apps[OWN_WORK] = (_own_work, False)
    from bench.minimal_app import application as minimal

    apps[MINIMAL] = (minimal, True)
    return apps


def _own_work(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """The service's own functions for the request, as its views call them, with no Django handler, DRF,
    middleware, token or validation around them: the body parsed and the answer written with orjson."""
    import orjson

    from assignments.assigning import assign_subject, assign_subjects
    from assignments.selectors import subject_types_active_steps
    from core.database import with_live_connection
    from idlinks.services import Identifier, id_link_create

    data = orjson.loads(environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])))
    path = environ["PATH_INFO"]
    if path == PATHS[ASSIGN]:
        answer = with_live_connection(
            assign_subjects, experiment_id=data["experiment_id"], subject_ids=data["subject_ids"], attributes=None
        )
        body = {"assignments": answer.assignments}
    elif path == PATHS[SUBJECT]:
        answer = with_live_connection(
            assign_subject, subject=data["subject"], experiment_ids=data["experiments"], assign=True, attributes=None
        )
        body = {
            "assignments": answer.assignments,
            "new_assignments": answer.new_assignments,
            "unassigned": answer.unassigned,
        }
    else:
        first, second = (Identifier(**item) for item in data["identifiers"])
        with_live_connection(
            id_link_create, first=first, second=second, subject_types_active=subject_types_active_steps
        )
        body = {"success": True}
    start_response("200 OK", [("Content-Type", "application/json")])
    return [orjson.dumps(body)]


@contextlib.contextmanager
def _log_to(path: Path) -> Iterator[None]:
    """Standard error (where the service's log handler writes) into `path` meanwhile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _environ(scenario_key: str, body: bytes | None, token: str) -> dict[str, Any]:
    scenario = SCENARIOS[scenario_key]
    raw = body or b""
    environ = {
        "REQUEST_METHOD": "GET" if body is None else "POST",
        "PATH_INFO": scenario.path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1",
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if body is not None:
        environ.update(CONTENT_TYPE="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    return environ


def _call(app: WsgiApp, environ: dict[str, Any]) -> int:
    """One request through `app`, as a WSGI server makes it; its thread CPU in nanoseconds."""
    statuses: list[str] = []
    started = time.thread_time_ns()
    answer = app(environ, lambda status, headers, exc_info=None: statuses.append(status))
    body = b"".join(answer)
    if hasattr(answer, "close"):
        answer.close()
    spent = time.thread_time_ns() - started
    if not statuses or not statuses[0].startswith("200"):
        raise SystemExit(f"{environ['PATH_INFO']}: {statuses[:1]} {body[:300]!r}")
    return spent


def _measure(
    variants: dict[str, tuple[WsgiApp, bool]], key: str, *, token: str, seeded: int, calls: int
) -> list[dict[str, Any]]:
    scenario = SCENARIOS[key]
    apps = {label: app for label, (app, health) in variants.items() if health or scenario.kind != HEALTHZ}
    run = time.strftime("%H%M%S")
    ids = {
        label: SubjectIds(scenario=scenario, prefix=f"fw{run}{number}", seeded=seeded, seed=number)
        for number, label in enumerate(apps)
    }

    def environ(label: str) -> dict[str, Any]:
        body = None if scenario.kind == HEALTHZ else request_body(scenario, ids[label].next_batch())
        return _environ(key, body, token)

    for label, app in apps.items():
        for _ in range(WARMUP_CALLS):
            _call(app, environ(label))
    spent: dict[str, list[int]] = {label: [] for label in apps}
    for _ in range(calls):
        for label, app in apps.items():
            spent[label].append(_call(app, environ(label)))
    print(f"{key}: {calls} calls per variant", flush=True)
    results = []
    for label, times in spent.items():
        times.sort()
        kept = times[: max(1, round(len(times) * (1 - TRIMMED)))]
        results.append(
            {
                "scenario": key,
                "variant": label,
                "calls": calls,
                "median_us": statistics.median(times) / 1000,
                "trimmed_mean_us": statistics.fmean(kept) / 1000,
            }
        )
    return results


def _table(results: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Each variant beside Django's handler with every middleware: the service without its edge (core/edge), and
    the base every other variant leaves layers off."""
    header = [
        "scenario",
        "variant",
        "median µs",
        "trimmed mean µs",
        "less than every middleware µs",
        "÷ every middleware",
    ]
    base = {result["scenario"]: result["median_us"] for result in results if result["variant"] == ONE_CHAIN}
    rows = []
    for result in results:
        # None for /healthz, which only the edge answers.
        whole = base.get(result["scenario"])
        rows.append(
            [
                result["scenario"],
                result["variant"],
                f"{result['median_us']:.0f}",
                f"{result['trimmed_mean_us']:.0f}",
                "" if whole is None or result["variant"] == ONE_CHAIN else f"{whole - result['median_us']:.0f}",
                "" if whole is None else f"{result['median_us'] / whole:.2f}",
            ]
        )
    return header, rows


def _markdown(data: dict[str, Any], table: tuple[list[str], list[list[str]]]) -> str:
    return "\n".join(
        [
            f"# What each layer costs a small request, in one process: {data['started_at']}",
            "",
            f"Command: `{data['command']}`, commit {data['commit']}, Python {data['python']}.",
            "",
            f"- Machine: {data['machine']['cpu_model']}, {data['machine']['cores']} cores; {data['machine']['os']}.",
            "- Thread CPU per call (no HTTP server; PostgreSQL's CPU not counted), the variants taking turns "
            "request by request; median and the mean of the fastest 95 %. Every variant is set beside Django's "
            "handler with every middleware: the service without its edge, and what the "
            "`without` variants leave layers off (bench/framework.py).",
            "",
            as_markdown(table),
            "",
        ]
    )
