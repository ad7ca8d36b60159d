"""Every helper the tests share, one module per noun; conftest.py files declare fixtures only.

- api: problem+json checks, the in-process API client and the SQL statements a request costs
- resources: builders of YAML resource documents, their apply through the real parser, the cohorts it stored,
  the history it recorded
- assignments: the assignment formula and the slot draw written independently of assignments/hashing.py and slots.py,
  assignments stored as another process would have, new rows as the service inserts them and their counts
- draws: the draws recomputed outside the service (docs/reference/sql-recipes.md), odd subject IDs, independence
- idlinks: identifier links made and read back, from one pair to a whole component
- link_graphs: small graphs of identifiers in memory, as idlinks/walk.py and assignments/linking.py walk them
- database: an unreachable database, lock waits, every table's text, whether the suite runs on Citus
- observability: the service's log lines and /metrics read back into numbers
- processes: manage.py run as a real process
- commands: management commands run in this process, and what they print
- exports: what the export commands write, read back (CSV rows, the server-side cursors they open), and the
  rows and --since values both are tested with
- server: gunicorn and scripts/run-demo in a subprocess, for the end-to-end tests
- browser: what a browser would post from a rendered form
- admin: the staff console's pages read and submitted as staff would, and what its page tests set up
"""

from __future__ import annotations

from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
