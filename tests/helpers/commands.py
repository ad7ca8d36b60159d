"""Management commands run in this process, as the tests call them: what they print."""

from __future__ import annotations

import io

from django.core.management import call_command


def command_output(command: str, *args: str) -> str:
    """What `manage.py command *args` prints on stdout (stderr goes where it goes)."""
    stdout = io.StringIO()
    call_command(command, *args, stdout=stdout)
    return stdout.getvalue()


def command_streams(command: str, *args: str) -> tuple[str, str]:
    """What `manage.py command *args` prints on stdout and on stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()
