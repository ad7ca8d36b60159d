"""The servers of the HTTP targets, each started for one benchmark run and stopped after it.

The service as deployed: `gunicorn -c deploy/gunicorn.conf.py` (devtools.gunicorn),
every setting from that file and the environment it reads (GUNICORN_WORKERS, ...),
the application named on the command line only when the file names none
(wsgi_app). bench/run hot-path runs beside it the minimal app on every server an
outside check may pick (ServerCommand, minimal_command): under the service's own
gunicorn command (minimal), plain gunicorn sync and gthread workers, gunicorn's
ASGI worker and uvicorn; and the service with extra gunicorn options or from
another git revision, in a worktree (service_command, git_worktree). What a
gunicorn command resolves to is asked of gunicorn itself (gunicorn_printed)
before each start, so a result names the worker class, workers and threads it
ran with. A benchmark starts measuring only once every worker has booted and
gone idle: a worker still importing the application would count as load.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.cpu import children_of, process_cpu_seconds
from devtools import PROJECT_DIR
from devtools.gunicorn import Gunicorn, GunicornSettings, gunicorn_printed_config, settings_of
from devtools.gunicorn import gunicorn as devtools_gunicorn
from devtools.ports import free_port
from devtools.processes import process_stop

# Named on the command line when a checkout's config file names no wsgi_app (an older revision's).
SERVICE_APP = "config.wsgi:application"
MINIMAL_APP = "bench.minimal_app:application"
MINIMAL_ASGI_APP = "bench.minimal_asgi:application"
CONFIG = "deploy/gunicorn.conf.py"
# Where a command's port goes (each run takes a free one), shown as $PORT.
PORT = "PORT__"
# Plain gunicorn sync workers serve one request at a time each, so they need more processes than cores to
# overlap the waits for PostgreSQL, but each process more contends for the 2 cores. Measured on 2 cores with wrk
# (16 connections, 3 rounds of 1-new, 1-existing, healthz, id-link, 1000-new): 4 workers served the most in
# 1-new, healthz and 1000-new (6 to 20 % more than 2) and were within 3 % of 2 in the other two; 8 served the
# least in four of the five (a third less than 4 in 1-existing). gthread kept the service's 2 x 4: 2 x 8 served
# less in four of the five scenarios.
SYNC_WORKERS = 4
# One uvicorn process per core, as gunicorn's workers.
UVICORN_WORKERS = 2


@dataclass(frozen=True)
class ServerCommand:
    """How an HTTP target starts: its command line (PORT where the port goes), the directory it runs in, what it
    adds to the deployment's environment, and whether gunicorn serves it (then --print-config resolves it)."""

    argv: tuple[str, ...]
    cwd: Path = PROJECT_DIR
    env: dict[str, str] = field(default_factory=dict)
    gunicorn: bool = True
    # Processes to wait for when gunicorn does not say (uvicorn).
    workers: int = 0
    # Where cwd comes from when it is not this checkout: "git worktree of <revision> (<commit>)".
    source: str | None = None

    def args(self, port: int) -> list[str]:
        return [arg.replace(PORT, str(port)) for arg in self.argv]

    def text(self) -> str:
        """The command a reader can run (from the checkout, or cd'd into the worktree it names)."""
        python = sys.executable
        # The checkout's virtualenv by its path in the checkout: from a worktree, under $CHECKOUT, never this
        # machine's own path.
        with contextlib.suppress(ValueError):
            inside = str(Path(python).relative_to(PROJECT_DIR))
            python = inside if self.source is None else f"$CHECKOUT/{inside}"
        words = [f"{name}={value}" for name, value in self.env.items()]
        words += [shlex.quote(python if arg == sys.executable else arg) for arg in self.argv]
        where = "" if self.source is None else f"(in a {self.source}) cd $WORKTREE && "
        return where + " ".join(words).replace(PORT, "$PORT")


def config_names_app(root: Path) -> bool:
    """Whether root's deploy/gunicorn.conf.py names the application itself (a top-level `wsgi_app = ...`)."""
    return re.search(r"^wsgi_app\s*[:=]", (root / CONFIG).read_text(), re.MULTILINE) is not None


def _gunicorn(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "gunicorn", *args)


def service_command(
    *, root: Path = PROJECT_DIR, options: Sequence[str] = (), source: str | None = None
) -> ServerCommand:
    """The deployment's command, `gunicorn -c deploy/gunicorn.conf.py`, in root with options added, and the
    application named only when the file names none (an older revision's)."""
    app = () if config_names_app(root) else (SERVICE_APP,)
    return ServerCommand(
        argv=_gunicorn("-c", CONFIG, "--bind", f"127.0.0.1:{PORT}", *options, *app), cwd=root, source=source
    )


def minimal_command(target: str, *, workers: int, threads: int, env: dict[str, str]) -> ServerCommand:
    """The minimal app's server of a hot-path target; workers and threads: the service's workers and its
    database connections per worker. The plain gunicorn ones have no control socket, which would be one path
    per user for every instance on the host (deploy/gunicorn.conf.py turns it off too)."""
    bind = ("--bind", f"127.0.0.1:{PORT}")
    plain = ("--no-control-socket", *bind)
    if target == "minimal":
        # As the service runs: its config file, worker class (uvicorn's, an ASGI server) and settings.
        return ServerCommand(argv=_gunicorn("-c", CONFIG, *bind, MINIMAL_ASGI_APP), env=env)
    if target == "minimal-sync":
        return ServerCommand(argv=_gunicorn("-k", "sync", "-w", str(SYNC_WORKERS), *plain, MINIMAL_APP), env=env)
    if target == "minimal-gthread":
        argv = _gunicorn("-k", "gthread", "-w", str(workers), "--threads", str(threads), *plain, MINIMAL_APP)
        return ServerCommand(argv=argv, env=env)
    if target == "minimal-asgi":
        # gunicorn's default HTTP parser, gunicorn-h1c when installed. gunicorn 27.0.1's ASGI worker with it and
        # uvloop closes a kept-alive connection, without saying so, after a request body larger than about
        # 64 KB (the parser reports its tail truncated): the next request on it fails. Only the Python load's
        # 1000-subject batches with attributes are that large (1000-new-gated*), which wrk does not send.
        argv = _gunicorn("-k", "asgi", "--asgi-loop", "uvloop", "-w", str(workers), *plain, MINIMAL_ASGI_APP)
        return ServerCommand(argv=argv, env=env)
    if target == "minimal-uvicorn":
        argv = (
            sys.executable,
            "-m",
            "uvicorn",
            MINIMAL_ASGI_APP,
            "--host",
            "127.0.0.1",
            "--port",
            PORT,
            "--workers",
            str(UVICORN_WORKERS),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
        )
        return ServerCommand(argv=argv, env=env, gunicorn=False, workers=UVICORN_WORKERS)
    raise ValueError(f"no minimal target {target!r}")


def gunicorn_printed(command: ServerCommand, env: dict[str, str]) -> dict[str, Any]:
    """What the gunicorn command would run with in env, asked of gunicorn itself (`--print-config`, which loads
    the app to check it): devtools.gunicorn's GunicornSettings, and the HTTP parser."""
    values = gunicorn_printed_config(command.args(0), cwd=command.cwd, env=env)
    return {**asdict(settings_of(values)), "http_parser": values.get("http_parser")}


@dataclass
class HttpServer:
    """A running target: where it listens, its master process and its log."""

    host: str
    port: int
    process: subprocess.Popen
    log_path: Path


def _is_worker(pid: int) -> bool:
    # uvicorn's master starts multiprocessing's resource tracker beside its workers.
    try:
        return b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def worker_pids(server: Gunicorn | HttpServer) -> list[int]:
    return [pid for pid in children_of(server.process.pid) if _is_worker(pid)]


def _wait_until_ready(server: Gunicorn | HttpServer, *, workers: int, timeout: float) -> None:
    """Until every worker has booted: a request that touches no database gets its answer (404), then the
    workers sit idle, so none is still importing the application when the load starts."""
    deadline = time.monotonic() + timeout
    answered = False
    last_cpu = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited with {server.process.returncode}; its log: {server.log_path}")
        pids = worker_pids(server)
        if len(pids) >= workers and not answered:
            connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
            try:
                connection.request("GET", "/bench-ready-probe")
                answered = connection.getresponse().status == 404
            except OSError:
                pass
            finally:
                connection.close()
        if answered:
            cpu = sum(process_cpu_seconds(pids).values())
            if cpu == last_cpu:
                return
            last_cpu = cpu
        time.sleep(0.25)
    raise TimeoutError(f"the server did not answer within {timeout}s; its log: {server.log_path}")


@contextlib.contextmanager
def http_server(*, command: ServerCommand, env: dict[str, str], workers: int, log_path: Path) -> Iterator[HttpServer]:
    """The command's server on a free port of 127.0.0.1 with env as its whole environment, ready and idle (every
    one of `workers` processes booted); its output appended to log_path. Stopping waits up to 40 s: a worker
    finishing a 1000-subject batch under load takes its time."""
    port = free_port()
    with open(log_path, "a") as log:
        process = subprocess.Popen(command.args(port), cwd=command.cwd, env=env, stdout=log, stderr=log)
    server = HttpServer(host="127.0.0.1", port=port, process=process, log_path=log_path)
    try:
        _wait_until_ready(server, workers=workers, timeout=60)
        yield server
    finally:
        process_stop(process, timeout=40)
        # -15: our own SIGTERM; anything else means the server failed, and its log says why.
        if process.returncode not in (0, -15):
            print(f"the server exited with {process.returncode}; its log: {log_path}", file=sys.stderr)


@contextlib.contextmanager
def gunicorn(*, app: str | None, env: dict[str, str], settings: GunicornSettings, log_path: Path) -> Iterator[Gunicorn]:
    """gunicorn serving `app` as devtools.gunicorn starts it, on a free port, ready and idle; its output appended
    to log_path. `settings` are gunicorn_settings' for the same app and env. Stopping waits up to 40 s."""
    with devtools_gunicorn(
        env=env,
        log_path=log_path,
        app=app,
        ready=lambda server: _wait_until_ready(server, workers=settings.workers, timeout=60),
        stop_timeout=40,
    ) as server:
        yield server


@contextlib.contextmanager
def git_worktree(revision: str) -> Iterator[tuple[Path, str]]:
    """A detached git worktree of revision in a temporary directory, and its commit; removed at the end. It has
    a HEAD and an index of its own: the checkout's are left as they are."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if not commit:
        raise ValueError(f"--service-at: no git revision {revision!r}")
    parent = Path(tempfile.mkdtemp(prefix="bench-service-at-"))
    directory = parent / "tree"
    try:
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(directory), commit],
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            check=True,
        )
        yield directory, commit
    finally:
        if directory.exists():
            removed = subprocess.run(
                ["git", "worktree", "remove", "--force", str(directory)],
                cwd=PROJECT_DIR,
                capture_output=True,
                text=True,
                check=False,
            )
            if removed.returncode != 0:
                print(f"git worktree remove {directory}: {removed.stderr.strip()}", file=sys.stderr)
        shutil.rmtree(parent, ignore_errors=True)
