"""The edge accounts for every middleware of settings.MIDDLEWARE: one added there fails here until the edge says
what it does for it (core/edge/middleware.py)."""

from __future__ import annotations

from django.conf import settings

from core.edge.middleware import ACCOUNTED


def test_middleware__every_entry_accounted_for_by_the_edge__and_nothing_else():
    assert len(set(settings.MIDDLEWARE)) == len(settings.MIDDLEWARE)
    assert set(settings.MIDDLEWARE) == set(ACCOUNTED)
