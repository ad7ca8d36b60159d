"""bench/run reliability: the service as deployed, under the conditions that break services rather than slow them.

Three experiments, each on a fresh database, each printing its figures as it ends:

  race    several independent gunicorn servers assigning the same new subjects at
          once: one row per subject, every answer the stored variant (bench/reliability/race.py)
  outage  a private PostgreSQL cluster stopped under load and started again: only
          fast 503 database_unavailable meanwhile, recovery without a restart,
          assignments unchanged, a log that does not flood (bench/reliability/outage.py)
  soak    constant load for minutes: memory, database connections and rate stay
          flat, nothing fails (bench/reliability/soak.py)

Writes bench/results/<name>.md and .json. Exits 1 if a check failed. Every
gunicorn is `gunicorn -c deploy/gunicorn.conf.py config.wsgi:application` with
the deployment's settings; GUNICORN_* variables of the environment reach it,
except the ones an experiment sets (named in its options).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import secrets
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.database import DatabaseServer, postgres_url_argument
from bench.reliability.findings import Findings, results_write
from bench.reliability.outage import OutageOptions, outage_findings, run_outage
from bench.reliability.race import RaceOptions, race_findings, run_race
from bench.reliability.soak import SoakOptions, run_soak, soak_findings
from bench.reliability.traffic import MAX_SUBJECTS
from bench.report import git_commit, machine
from bench.rounds import HelpFormatter
from devtools import PROJECT_DIR

# In the order they run.
EXPERIMENTS = ("race", "outage", "soak")

EPILOG = """\
A quick look at all three (about two minutes on 2 cores):
  bench/run reliability --race-seconds 5 --outage-seconds 3 --soak-seconds 20
The defaults take about 13 minutes, 10 of them the soak. gunicorn's output goes to
var/bench-reliability-<experiment>.log.
"""


def _experiments(raw: str) -> list[str]:
    chosen = [item.strip() for item in raw.split(",") if item.strip()]
    if not chosen or any(item not in EXPERIMENTS for item in chosen):
        raise argparse.ArgumentTypeError(f"choose from {','.join(EXPERIMENTS)} (got {raw!r})")
    return chosen


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(raw: str) -> Any:
        value = kind(raw)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive (got {raw!r})")
        return value

    return parse


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run reliability", description=__doc__, epilog=EPILOG, formatter_class=HelpFormatter
    )
    parser.add_argument(
        "--only",
        type=_experiments,
        default=list(EXPERIMENTS),
        help=f"the experiments to run, comma-separated, from {','.join(EXPERIMENTS)}",
    )
    postgres_url_argument(
        parser,
        "a maintenance database on the server the race and the soak use (env BENCH_POSTGRES_URL); their "
        "databases are created beside it and dropped at the end. The outage runs its own cluster",
    )
    race = parser.add_argument_group("race")
    race.add_argument("--race-servers", type=_positive(int), default=4, help="independent gunicorn servers")
    race.add_argument(
        "--race-workers", type=_positive(int), default=1, help="worker processes per server, passed as GUNICORN_WORKERS"
    )
    race.add_argument("--race-clients", type=_positive(int), default=16, help="client processes")
    race.add_argument("--race-seconds", type=_positive(float), default=30.0, help="how long the clients send")
    race.add_argument("--race-subjects", type=_positive(int), default=3000, help="new subject IDs in the shared pool")
    race.add_argument("--race-batch", type=_positive(int), default=10, help="subject IDs per request")
    outage = parser.add_argument_group("outage")
    outage.add_argument("--outage-clients", type=_positive(int), default=8, help="client processes")
    outage.add_argument("--outage-before", type=_positive(float), default=5.0, help="seconds of load before the stop")
    outage.add_argument(
        "--outage-seconds",
        type=_positive(float),
        default=10.0,
        help="seconds from stopping the database to starting it again",
    )
    outage.add_argument(
        "--outage-after", type=_positive(float), default=5.0, help="seconds of load kept after the first 200"
    )
    soak = parser.add_argument_group("soak")
    soak.add_argument("--soak-seconds", type=_positive(float), default=600.0, help="how long the load lasts")
    soak.add_argument("--soak-clients", type=_positive(int), default=8, help="client processes")
    soak.add_argument(
        "--soak-interval", type=_positive(float), default=10.0, help="seconds between memory and connection samples"
    )
    soak.add_argument(
        "--soak-max-requests",
        type=int,
        default=0,
        help="GUNICORN_MAX_REQUESTS of the soak's gunicorn: 0 keeps every worker for the whole soak, so its "
        "memory shows a slow leak; the deployment's is 1000000 (then recycled workers are listed)",
    )
    parser.add_argument(
        "--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results", help="where the results are written"
    )
    parser.add_argument("--results-name", default="reliability", help="file name (without extension) of the results")
    args = parser.parse_args(argv)
    if args.race_batch > min(MAX_SUBJECTS, args.race_subjects):
        parser.error(f"--race-batch must be at most {MAX_SUBJECTS} and at most --race-subjects")
    if args.soak_max_requests < 0:
        parser.error("--soak-max-requests must be 0 or more")
    return args


def _log_path(name: str) -> Path:
    """This run's gunicorn output of one experiment (emptied first: the outage counts its lines)."""
    path = PROJECT_DIR / "var" / f"bench-reliability-{name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


@dataclass(frozen=True)
class ExperimentRun:
    # Made of the experiment's own options: --<name>-<field> for each of its fields.
    options: type
    run: Callable[..., dict[str, Any]]
    findings: Callable[[dict[str, Any]], Findings]
    # On a database beside --postgres-url; the outage runs a private cluster of its own.
    on_server: bool


RUNS = {
    "race": ExperimentRun(RaceOptions, run_race, race_findings, on_server=True),
    "outage": ExperimentRun(OutageOptions, run_outage, outage_findings, on_server=False),
    "soak": ExperimentRun(SoakOptions, run_soak, soak_findings, on_server=True),
}


def _own_options(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """The experiment's own options, as given or defaulted, without their prefix."""
    prefix = f"{name}_"
    return {key.removeprefix(prefix): value for key, value in vars(args).items() if key.startswith(prefix)}


def _experiment_run(
    name: str, args: argparse.Namespace, secret_key: str, run_id: str
) -> tuple[dict[str, Any], Findings]:
    experiment = RUNS[name]
    run = functools.partial(
        experiment.run, experiment.options(**_own_options(args, name)), secret_key=secret_key, run_id=run_id
    )
    if experiment.on_server:
        with contextlib.closing(DatabaseServer(args.postgres_url)) as server:
            result = run(server=server, log_path=_log_path(name))
    else:
        result = run(log_path=_log_path(name))
    return result, experiment.findings(result)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    started_at = datetime.now(UTC)
    setup = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "command": " ".join(["bench/run reliability", *argv]),
        "machine": machine(),
        "python": platform.python_version(),
        "django": version("django"),
        "gunicorn": version("gunicorn"),
        "commit": git_commit(),
    }
    secret_key = os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50)
    # Subject IDs carry it: new in every run.
    run_id = secrets.token_hex(4)
    results: dict[str, Any] = {}
    findings: list[Findings] = []
    for name in (name for name in EXPERIMENTS if name in args.only):
        print(f"\n{name}: {arguments_used(args, name)}", flush=True)
        try:
            result, found = _experiment_run(name, args, secret_key, run_id)
        except Exception as error:
            traceback.print_exc()
            result = {"failures": [f"the experiment stopped: {type(error).__name__}: {error}"]}
            found = Findings(title=name, failures=result["failures"])
        results[name] = result
        findings.append(found)
        print("\n" + found.text(), flush=True)
    json_path, markdown_path = results_write(
        directory=args.results_dir, name=args.results_name, setup=setup, results=results, findings=findings
    )
    print(f"\nwrote {json_path} and {markdown_path}")
    failed = [f"{section.title}: {failure}" for section in findings for failure in section.failures]
    for failure in failed:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failed else 0


def arguments_used(args: argparse.Namespace, name: str) -> str:
    """The experiment's own options, as given or defaulted."""
    return " ".join(f"--{name}-{key.replace('_', '-')} {value}" for key, value in _own_options(args, name).items())
