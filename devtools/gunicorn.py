"""The service (or another WSGI app) under gunicorn exactly as deployed: `gunicorn -c deploy/gunicorn.conf.py`.

Tests, benchmarks and scripts start it here so that what they exercise is the
deployment's own configuration file, not a copy of its options. Only the bind
address is forced (a free port on 127.0.0.1) and whatever `options` a caller
adds on the command line, which gunicorn ranks above the file.

The server's output (error log, and the access log when the configuration turns
it on) goes to the caller's `log_path`: the end-to-end tests put it in pytest's
tmp_path (see tests/helpers/server.py), the benchmarks under var/. If the server exits
with an error its log's path is printed on stderr.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools import PROJECT_DIR
from devtools.ports import free_port, wait_for_port
from devtools.processes import process_stop

CONFIG = PROJECT_DIR / "deploy" / "gunicorn.conf.py"
# What the file names with wsgi_app: for a checkout of the service whose file does not.
SERVICE_APP = "config.wsgi:application"


def gunicorn_command(app: str | None = None, *options: str) -> list[str]:
    """The deployment's command line with this interpreter's gunicorn, so it runs in the same virtualenv: the
    service (the file's wsgi_app) unless another application is named."""
    return [sys.executable, "-m", "gunicorn", "-c", str(CONFIG), *options, *([app] if app else [])]


@dataclass
class Gunicorn:
    """A running server: where it listens, its master process and its log."""

    host: str
    port: int
    process: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _listening(server: Gunicorn) -> None:
    # The port, not /healthz: some tests start the service with its database unreachable on purpose.
    wait_for_port(server.port)


@contextlib.contextmanager
def gunicorn(
    *,
    env: dict[str, str],
    log_path: Path,
    app: str | None = None,
    options: Sequence[str] = (),
    ready: Callable[[Gunicorn], None] = _listening,
    stop_timeout: float = 10.0,
    port: int | None = None,
) -> Iterator[Gunicorn]:
    """gunicorn serving `app` (None: the service) on a free port of 127.0.0.1 with env as its whole environment,
    its output appended to log_path; yielded once `ready` returns (by default: once the port accepts connections),
    stopped (SIGTERM, SIGKILL after stop_timeout seconds) at the end. port: when the caller needs to know it
    beforehand (to name the log after it)."""
    port = port or free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        process = subprocess.Popen(
            gunicorn_command(app, "--bind", f"127.0.0.1:{port}", *options),
            cwd=PROJECT_DIR,
            env=env,
            stdout=log,
            stderr=log,
        )
    server = Gunicorn(host="127.0.0.1", port=port, process=process, log_path=log_path)
    try:
        ready(server)
        yield server
    finally:
        process_stop(process, timeout=stop_timeout)
        # -15: our own SIGTERM; anything else means the server failed, and its log says why.
        if process.returncode not in (0, -15):
            print(f"gunicorn exited with {process.returncode}; its log: {log_path}", file=sys.stderr)


@dataclass(frozen=True)
class GunicornSettings:
    """The settings of deploy/gunicorn.conf.py that shape a load, as gunicorn resolves them."""

    worker_class: str
    workers: int
    threads: int
    keepalive: int
    max_requests: int
    preload_app: bool
    access_log: bool


def gunicorn_settings(*, app: str | None = None, env: dict[str, str]) -> GunicornSettings:
    """What `gunicorn -c deploy/gunicorn.conf.py [app]` would run with in `env`, asked of gunicorn itself
    (`--print-config`, which loads the app to check it): a benchmark's results then name what it ran with
    even while someone tunes the file."""
    return settings_of(gunicorn_printed_config(gunicorn_command(app), cwd=PROJECT_DIR, env=env))


def gunicorn_printed_config(argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """Every setting the gunicorn command `argv` would run with, by name, as its `--print-config` prints them."""
    printed = subprocess.run([*argv, "--print-config"], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if printed.returncode != 0:
        raise RuntimeError(f"gunicorn --print-config failed:\n{printed.stdout[-2000:]}{printed.stderr[-2000:]}")
    lines = (line.partition("=") for line in printed.stdout.splitlines())
    return {name.strip(): value.strip() for name, _, value in lines}


def settings_of(values: dict[str, str]) -> GunicornSettings:
    """The settings that shape a load, from gunicorn_printed_config's."""
    threads = int(values["threads"])
    worker_class = values["worker_class"]
    # gunicorn's own rule (Config.worker_class_str): sync workers given threads run as gthread ones.
    if worker_class in ("sync", "gunicorn.workers.sync.SyncWorker") and threads > 1:
        worker_class = "gthread"
    return GunicornSettings(
        worker_class=worker_class,
        workers=int(values["workers"]),
        threads=threads,
        keepalive=int(values["keepalive"]),
        max_requests=int(values["max_requests"]),
        preload_app=values["preload_app"] == "True",
        access_log=values["accesslog"] != "None",
    )
