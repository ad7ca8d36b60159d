#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line
    from django.db import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except OperationalError as exc:
        # A database that does not exist, a server that cannot be reached, a role refused: one line
        # that says which database, not a 30-frame traceback (--traceback still shows it).
        if "--traceback" in sys.argv:
            raise
        from core.database import database_failure_line

        sys.exit(database_failure_line(exc))
    except BrokenPipeError:
        # The reader went away (`| head`), for any command. Point stdout at /dev/null so that
        # Python's final flush of what is still buffered does not fail again with a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.stderr.write("stdout was closed before the command finished\n")
        sys.exit(1)
