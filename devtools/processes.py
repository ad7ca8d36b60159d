"""Stopping the servers we start, so that a failing run leaves no process behind."""

from __future__ import annotations

import subprocess


def process_stop(process: subprocess.Popen, *, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process has not ended within timeout seconds: a graceful stop lets
    gunicorn and PostgreSQL finish what they write, a stuck one must not hang the caller."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
