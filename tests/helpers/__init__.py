"""Every helper the tests share, one module per noun; conftest.py files declare fixtures only.

- api: problem+json checks and the in-process API client
- resources: builders of YAML resource documents and their apply through the real parser
- assignments: the assignment formula and the slot draw written independently of assignments/hashing.py and slots.py
- idlinks: identifier links made and read back, from one pair to a whole component
- database: an unreachable database, lock waits, every table's text
- observability: the service's log lines and /metrics read back into numbers
- processes: manage.py run as a real process
- server: gunicorn and scripts/run-demo in a subprocess, for the end-to-end tests
- browser: what a browser would post from a rendered form
- admin: the staff console's pages read and submitted as staff would
"""

from __future__ import annotations

from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
