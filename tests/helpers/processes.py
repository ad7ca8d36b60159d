"""manage.py commands run as real processes, for what only a process shows: exit codes, what reaches
stdout and stderr, a reader that closes stdout early, and stderr being a terminal or a pipe.

The run_manage* ones use the test session's PostgreSQL database (tests.helpers.server.database_url_for_tests),
so the tests that call them are `@pytest.mark.postgres` and `django_db(transaction=True)` (the rows they set
up must be committed for another process to see them); manage_run and manage_output use the database their env
names.
"""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios
import threading
from dataclasses import dataclass

from tests.helpers import PROJECT_DIR
from tests.helpers.server import database_url_for_tests

CLOSED_STDOUT_MESSAGE = "stdout was closed before the command finished"


def manage_run(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `manage.py args` with env added to ours; stdout and stderr as text."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def manage_output(*args: str, env: dict[str, str], timeout: float = 120) -> str:
    """Run `manage.py args` with env added to ours; its stdout, after checking it succeeded."""
    result = manage_run(*args, env=env, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result.stdout


def manage_env() -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": database_url_for_tests(), "SECRET_KEY": "command-tests"}


def run_manage(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `manage.py args`, stdout and stderr both pipes (stderr is then not a terminal)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env=manage_env(),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def manage_started(*args: str, stderr) -> subprocess.Popen:
    """Start `manage.py args` on the test session's database: stdin empty, stdout a pipe, stderr as given."""
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env=manage_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


@dataclass(frozen=True)
class ClosedStdoutRun:
    returncode: int
    lines_read: list[bytes]
    stderr: str


def run_manage_reader_leaves(*args: str, lines: int) -> ClosedStdoutRun:
    """Run `manage.py args | head -<lines>`: read that many lines of stdout (0: none), then close it."""
    process = manage_started(*args, stderr=subprocess.PIPE)
    try:
        lines_read = [process.stdout.readline() for _ in range(lines)]
        process.stdout.close()
        stderr = process.stderr.read()
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return ClosedStdoutRun(returncode=process.returncode, lines_read=lines_read, stderr=stderr.decode())


def run_manage_piped_to_head(*args: str, lines: int) -> subprocess.CompletedProcess:
    """Run `set -o pipefail; manage.py args | head -n <lines>` in bash: the exit status is the command's own
    (head's is 0), stdout what head printed, stderr the command's."""
    return subprocess.run(
        ["bash", "-c", f'set -o pipefail; "$@" | head -n {lines}', "bash", sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env=manage_env(),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


@dataclass(frozen=True)
class TerminalRun:
    returncode: int
    stdout: bytes
    terminal: bytes


def run_manage_stderr_on_terminal(*args: str) -> TerminalRun:
    """Run `manage.py args` with stderr on a pseudo-terminal of 100 columns (stdout stays a pipe);
    returns everything the terminal received."""
    master, slave = os.openpty()
    # A terminal has a size; a new pseudo-terminal's is 0x0, on which tqdm draws nothing.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    received: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every copy of the terminal's other end is closed
                return
            if not data:
                return
            received.append(data)

    try:
        process = manage_started(*args, stderr=slave)
    finally:
        os.close(slave)
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        stdout, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=10)
        os.close(master)
    return TerminalRun(returncode=process.returncode, stdout=stdout, terminal=b"".join(received))


# An environment as production sets it: no TLS decisions taken yet.
PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": "k" * 20 + "production-like-secret-key-for-the-deploy-check-0123456789",
    "DATABASE_URL": "postgres://app@db.internal:5432/assignments",
    "ALLOWED_HOSTS": "api.example.com",
}
TLS_ENV = {
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "TRUST_X_FORWARDED_PROTO": "true",
}


def check_deploy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`manage.py check --deploy` in an environment of these variables, none of the security ones inherited."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("SECURE_", "TRUST_", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", *args],
        cwd=PROJECT_DIR,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
