"""Logging under failure: one line per kind of failure and a count, never a flood; and every line of a request
carries its ID."""

from __future__ import annotations

import logging
import os
import threading

from core.middleware.requestid import request_id_current

REPEAT_WINDOW_SECONDS = 10.0
MAX_KINDS = 1_000


class RepeatSummaryFilter(logging.Filter):
    """Lets the first record of a kind through, holds back the same kind for REPEAT_WINDOW_SECONDS,
    then writes one line with the count held back.

    A kind is the logger, the level and the message as written. During a
    database outage every request fails the same way: an operator needs the
    first line and the count, not two thousand copies that push everything else
    out of sight. The count is written when the window ends, by a timer, so it
    also comes when the failures have stopped; the next failure after that starts
    a new window with its own first line. DEBUG records always pass (they are
    off unless asked for). Each process counts its own.
    """

    def __init__(self, name: str = "", window: float = REPEAT_WINDOW_SECONDS) -> None:
        super().__init__(name)
        self.window = window
        self._held: dict[tuple[str, int, str], int] = {}
        self._lock = threading.Lock()
        # gunicorn forks its workers from a master that may have logged: its timers do not
        # cross the fork, so a child starts with nothing held rather than holding forever.
        os.register_at_fork(after_in_child=self._held.clear)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or getattr(record, "repeat_summary", False):
            return True
        kind = (record.name, record.levelno, record.getMessage())
        with self._lock:
            if kind in self._held:
                self._held[kind] += 1
                return False
            if len(self._held) >= MAX_KINDS:
                # Pathological variety: let records through rather than track them all.
                return True
            self._held[kind] = 0
        timer = threading.Timer(self.window, self._summarise, args=(kind,))
        timer.daemon = True
        timer.start()
        return True

    def _summarise(self, kind: tuple[str, int, str]) -> None:
        with self._lock:
            held = self._held.pop(kind, 0)
        if held:
            name, level, message = kind
            logging.getLogger(name).log(
                level,
                "%s [and %d more like this in %.0f s]",
                message,
                held,
                self.window,
                extra={"repeat_summary": True},
            )


class ServiceUnavailableFilter(logging.Filter):
    """Drops django.request's line for a 503: the service logs why itself (core/api/exceptions.py), once per kind."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) != 503


class RequestIdFilter(logging.Filter):
    """Gives every record the ID of the request being answered in its thread (None outside a request),
    for the formatters of core/observability/logformats.py."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_current()
        return True
