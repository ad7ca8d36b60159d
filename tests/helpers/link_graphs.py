"""Identifiers of small graphs in memory, as idlinks/walk.py and assignments/linking.py walk them: subject type pks
and the identifiers a hypothesis test draws links between."""

from __future__ import annotations

COOKIE, USER, DEVICE = 1, 2, 3
NODES = [(COOKIE, f"c{n}") for n in range(8)] + [(USER, f"u{n}") for n in range(4)]
