"""GET and HEAD /healthz (docs/reference/api.md, docs/explanation/health-and-outages.md).

Answered at the edge (core/edge, HealthzEndpoint), before any of Django's middleware,
so that no token check, session, host validation or other middleware work can slow it
or fail it: container platforms probe with the pod's address as Host and no credentials.

Why a thread: /healthz must answer within 3 seconds even when the
database accepts connections and never replies. Timeouts on the connection
alone do not give that: connect_timeout bounds the handshake, but a server
that stops answering mid-query (frozen, or cut off by a network partition)
keeps a client waiting with no client-side limit, and statement_timeout is
enforced by that same unresponsive server. So the probe (SELECT 1 on the
probe's own kept connection, see ProbeConnection) runs in a
daemon thread and the request waits for it at most PROBE_TIMEOUT_SECONDS.
One probe at a time per process: concurrent checks share the probe in flight,
checks within PROBE_REUSE_SECONDS of a successful one share its answer,
so a hanging database cannot pile up threads, and a probe hung for longer
than PROBE_ABANDON_SECONDS is replaced (at most MAX_ABANDONED_PROBES at once)
so that the check sees the database return even if that old probe never ends.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpResponse

from core.api.problems import problem_response
from core.database import message_first_line
from core.edge.middleware import django_chain
from core.observability.metrics import healthz_checked
from core.steps import Steps

# Named as before the module moved: log routing and docs/reference/metrics-and-logs.md know it by this name.
logger = logging.getLogger("config.healthz")

ALLOWED_METHODS = ("GET", "HEAD")
PROBE_TIMEOUT_SECONDS = 2.0
PROBE_ABANDON_SECONDS = 10.0
# A probe that succeeded this recently answers the next checks too: under a flood of
# checks (a load balancer's, a platform's, a benchmark's) the database sees at most
# one SELECT 1 per process per second, and an outage shows within that second.
PROBE_REUSE_SECONDS = 1.0
MAX_ABANDONED_PROBES = 4

BODY_OK = {"status": "ok", "database": "ok"}
BODY_UNAVAILABLE = {"status": "unavailable", "database": "unavailable"}


def connection_open():
    """A new connection with the service's own settings, bypassing the wrapper's request-scoped state
    (so DATABASE_URL options such as connect_timeout apply)."""
    wrapper = connections.create_connection(DEFAULT_DB_ALIAS)
    wrapper.connection = wrapper.get_new_connection(wrapper.get_connection_params())
    # Kept between probes, it must not sit idle in a transaction that SELECT 1 opened.
    wrapper.set_autocommit(True)
    return wrapper.connection


def _select_one(raw) -> None:
    cursor = raw.cursor()
    try:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    finally:
        cursor.close()


class ProbeConnection:
    """The probe's own connection, kept from one probe to the next.

    A new connection per check would make PostgreSQL fork a backend for every
    probe: with a platform's probes, a load balancer's and a few workers each,
    that is most of what a health check costs the database. The connection is
    never a request's: a request's failure says nothing about a new one, and its
    hang would hang the check. A probe takes it out while it runs (a hung probe
    keeps its own); if the kept one fails, a new one is tried at once, so a
    connection dropped while idle is not reported as an outage.
    """

    def __init__(self, connect: Callable[[], Any] = connection_open) -> None:
        self._connect = connect
        self._idle = None
        self._lock = threading.Lock()

    def query(self) -> None:
        """SELECT 1 on the kept connection, or on a new one; raises on any failure."""
        with self._lock:
            raw, self._idle = self._idle, None
        if raw is not None:
            try:
                _select_one(raw)
            except Exception:
                _close_quietly(raw)
                raw = None
        if raw is None:
            raw = self._connect()
            try:
                _select_one(raw)
            except Exception:
                _close_quietly(raw)
                raise
        with self._lock:
            if self._idle is None:
                self._idle, raw = raw, None
        if raw is not None:
            _close_quietly(raw)

    def close(self) -> None:
        """Close the kept connection, if any; the next probe opens a new one."""
        with self._lock:
            raw, self._idle = self._idle, None
        if raw is not None:
            _close_quietly(raw)


def _close_quietly(raw) -> None:
    try:
        raw.close()
    except Exception:
        logger.debug("health check: closing a probe connection failed", exc_info=True)


@dataclass
class _Probe:
    started_at: float
    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False
    finished_at: float = 0.0
    thread: threading.Thread | None = None


class DatabaseProbe:
    """Answers "does the database answer SELECT 1 within the timeout?", one probe thread at a time."""

    def __init__(
        self,
        query: Callable[[], None],
        *,
        reuse_success_for: float = PROBE_REUSE_SECONDS,
        abandon_after: float = PROBE_ABANDON_SECONDS,
        max_abandoned: int = MAX_ABANDONED_PROBES,
    ) -> None:
        self._query = query
        self._reuse_success_for = reuse_success_for
        self._abandon_after = abandon_after
        self._max_abandoned = max_abandoned
        self._lock = threading.Lock()
        self._current: _Probe | None = None
        self._abandoned: list[threading.Thread] = []

    def _run(self, probe: _Probe) -> None:
        try:
            self._query()
        except Exception as exc:
            logger.warning("health check: database probe failed: %s: %s", type(exc).__name__, message_first_line(exc))
            logger.debug("health check: database probe failed", exc_info=exc)
        else:
            probe.ok = True
        finally:
            probe.finished_at = time.monotonic()
            probe.done.set()

    def _start(self, now: float) -> _Probe:
        probe = _Probe(started_at=now)
        probe.thread = threading.Thread(target=self._run, args=(probe,), name="healthz-database-probe", daemon=True)
        probe.thread.start()
        self._current = probe
        return probe

    def _probe_to_wait_for(self) -> _Probe:
        now = time.monotonic()
        with self._lock:
            probe = self._current
            if probe is None:
                return self._start(now)
            if probe.done.is_set():
                if probe.ok and now - probe.finished_at < self._reuse_success_for:
                    return probe
                return self._start(now)
            if now - probe.started_at > self._abandon_after:
                self._abandoned = [thread for thread in self._abandoned if thread.is_alive()]
                if len(self._abandoned) < self._max_abandoned:
                    logger.warning(
                        "health check: database probe hung for %.0f s; starting another", now - probe.started_at
                    )
                    self._abandoned.append(probe.thread)
                    return self._start(now)
            return probe

    def answered_ok(self) -> bool:
        """True when a probe succeeded within the reuse time: the answer database_ok would give at once, told
        without a lock or a wait (a check answered on an event loop, core/edge/asgi.py)."""
        probe = self._current
        return (
            probe is not None
            and probe.done.is_set()
            and probe.ok
            and time.monotonic() - probe.finished_at < self._reuse_success_for
        )

    def forget(self) -> None:
        """Let the next check probe afresh, whatever the last probe found."""
        with self._lock:
            if self._current is not None and self._current.done.is_set():
                self._current = None

    def database_ok(self, *, timeout: float = PROBE_TIMEOUT_SECONDS) -> bool:
        probe = self._probe_to_wait_for()
        if not probe.done.wait(timeout):
            logger.warning("health check: database did not answer within %.1f s", timeout)
            return False
        return probe.ok


probe_connection = ProbeConnection()
database_probe = DatabaseProbe(probe_connection.query)


# Encoded once: every check answers one of the two.
CONTENT_OK = json.dumps(BODY_OK).encode()
CONTENT_UNAVAILABLE = json.dumps(BODY_UNAVAILABLE).encode()


def _json_response(content: bytes, *, status: int) -> HttpResponse:
    response = HttpResponse(content, status=status, content_type="application/json")
    # Answered before CommonMiddleware, which would otherwise add it.
    response["Content-Length"] = str(len(content))
    return response


def healthz(request, **_: Any) -> Steps[HttpResponse]:
    """The check's answer as steps (core/steps.py): a fresh success at once, else the probe waited for in a
    function step."""
    if request.method not in ALLOWED_METHODS:
        response = problem_response(
            status=405,
            code="method_not_allowed",
            title="Method not allowed",
            detail=f"Method {request.method!r} not allowed; use GET or HEAD.",
            headers={"Allow": ", ".join(ALLOWED_METHODS)},
        )
    elif database_probe.answered_ok() or (yield database_probe.database_ok):
        healthz_checked(ok=True)
        response = _json_response(CONTENT_OK, status=200)
    else:
        healthz_checked(ok=False)
        response = _json_response(CONTENT_UNAVAILABLE, status=503)
    # A cached answer about health is a wrong answer.
    response["Cache-Control"] = "no-store"
    return response


class HealthzEndpoint:
    """/healthz at the edge (core/edge), before Django's middleware: no host check, token or other
    middleware work can slow it or fail it."""

    name = "healthz"
    body_limited = True
    # The probe's statement is on a connection of its own.
    vendor = None
    # As Django's handler would answer a failure of the check itself: 500 problem+json, logged.
    respond = staticmethod(django_chain(healthz, layers=()))
