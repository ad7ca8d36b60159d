"""The gunicorn worker of deploy/gunicorn.conf.py: gthread, with threads kept for /healthz,
connections shared out evenly between the workers, and gunicorn's own error
answers in the API's problem+json.

Kept threads: a gthread worker hands every request to one pool of
GUNICORN_THREADS threads. When all of them wait on the database (a lock held by
a migration, a stuck transaction), a health check queues behind them, and a
platform that sees no answer restarts a process whose only fault is a slow
database. Here the worker looks at the first bytes of each request before
choosing a thread (a peek: nothing is consumed) and gives `GET /healthz` and
`HEAD /healthz` threads of their own, so they are answered while the API waits.
A new connection whose request has not arrived yet waits on the worker's poller,
as gunicorn already does for slow clients, until its first bytes tell which
pool it belongs to.

Connections shared out: a worker that holds more connections than another
live worker leaves a new connection in the listening socket's queue for that one
to accept, pausing its own accepts ACCEPT_PAUSE_SECONDS at a time; after
ACCEPT_DEFER_SECONDS it accepts anyway, so a connection waits no longer than that
even when the other worker cannot take it (its main thread starved, its
connection limit reached). The counts are deploy/connectionshares.py's.

Errors: gunicorn answers what it refuses before the application sees it (a
request line or header block over the limits, a malformed request) with an HTML
page. The same answers leave here as problem+json, as every other error does.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import time
from concurrent import futures
from functools import partial
from http import HTTPStatus

from gunicorn.workers.gthread import ThreadWorker

from core.middleware.requestid import REQUEST_ID_HEADER, request_id_new
from deploy.connectionshares import ConnectionShares

HEALTH_CHECK_STARTS = (b"GET /healthz", b"HEAD /healthz")
HEALTH_THREADS = 2
# Made in the master, as gunicorn imports the worker class, so every worker it forks shares it; one slot per
# worker, up to the most GUNICORN_WORKERS allows (deploy/gunicorn.conf.py).
SHARES = ConnectionShares(slots=256)
# A worker holding more connections than another leaves new ones to it this long at a time, and no longer in
# all: the other's main thread may wait for the GIL (sys.getswitchinterval(), 5 ms) before it accepts.
ACCEPT_PAUSE_SECONDS = 0.002
ACCEPT_DEFER_SECONDS = 0.02
_PEEK_BYTES = max(len(start) for start in HEALTH_CHECK_STARTS)


def request_start(conn) -> bytes | None:
    """The first bytes of the connection's next request, without consuming them; None if none arrived yet.

    Only the socket is looked at: a request a client pipelined behind another, which gunicorn may have read
    already, goes to the main pool, as any request whose start is not known.
    """
    try:
        return conn.sock.recv(_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return None
    except OSError:
        # Reset or closed: the request's own thread will find out and close it.
        return b""


def is_health_check(start: bytes) -> bool:
    # A request whose first bytes have not all arrived goes to the main pool, as any other.
    return start.startswith(HEALTH_CHECK_STARTS)


class ServiceWorker(ThreadWorker):
    def init_process(self):
        self.health_pool = futures.ThreadPoolExecutor(max_workers=HEALTH_THREADS, thread_name_prefix="healthz")
        self.share_slot = SHARES.claim(os.getpid())
        self._accept_paused_until = 0.0
        self._deferring_since = self._deferred_at = 0.0
        super().init_process()

    def run(self):
        try:
            super().run()
        finally:
            if self.share_slot is not None:
                SHARES.release(self.share_slot)

    def accept(self, listener):
        now = time.monotonic()
        if self._leaves_to_another(now):
            self._accept_paused_until = now + ACCEPT_PAUSE_SECONDS
            self.set_accept_enabled(False)
            return
        super().accept(listener)
        self._connections_published()

    def _leaves_to_another(self, now: float) -> bool:
        """Whether another live worker holds fewer connections, and this one has not yet left the
        connection waiting for ACCEPT_DEFER_SECONDS."""
        fewest = None if self.share_slot is None else SHARES.fewest_elsewhere(self.share_slot)
        if fewest is None or fewest >= self.nr_conns:
            return False
        # Deferring since the first of a run of pauses; a pause long over means the last connection was taken.
        if now - self._deferred_at > 2 * ACCEPT_PAUSE_SECONDS:
            self._deferring_since = now
        self._deferred_at = now
        return now - self._deferring_since < ACCEPT_DEFER_SECONDS

    def set_accept_enabled(self, enabled):
        # ThreadWorker.run enables accepting again on its next turn; a pause holds until it ends.
        if enabled and time.monotonic() < self._accept_paused_until:
            return
        super().set_accept_enabled(enabled)

    def wait_for_and_dispatch_events(self, timeout):
        # Connections closed since the last turn are counted off.
        self._connections_published()
        if self._accept_paused_until:
            # Awake when the pause ends: ThreadWorker.run's next turn enables accepting again.
            remaining = self._accept_paused_until - time.monotonic()
            if remaining <= 0:
                self._accept_paused_until = 0.0
            timeout = min(timeout, max(remaining, 0.0))
        super().wait_for_and_dispatch_events(timeout)

    def _connections_published(self) -> None:
        if self.share_slot is not None:
            SHARES.hold(self.share_slot, self.nr_conns)

    def enqueue_req(self, conn):
        start = request_start(conn)
        if start is None and not conn.initialized:
            self._wait_for_request(conn)
            return
        pool = self.health_pool if start and is_health_check(start) else self.tpool
        future = pool.submit(self.handle, conn)
        future.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, done))

    def _wait_for_request(self, conn) -> None:
        """Leave a connection that has sent nothing yet to the poller, as gunicorn leaves one
        whose request did not arrive within its first wait (ThreadWorker.finish_request)."""
        conn.sock.setblocking(False)
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def handle_quit(self, sig, frame):
        self.health_pool.shutdown(wait=False)
        super().handle_quit(sig, frame)

    def handle_error(self, req, client, addr, exc):
        super().handle_error(req, _ProblemSocket(client), addr, exc)


class _ProblemSocket:
    """The client socket as gunicorn's error writer sees it: its HTML error page goes out as problem+json.

    gunicorn.util.write_error writes one complete response (`HTTP/1.1 <status>
    <reason>`, then Connection: close); only its status line is kept.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def gettimeout(self):
        return self._sock.gettimeout()

    def setblocking(self, flag):
        self._sock.setblocking(flag)

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(problem_response(data))


def problem_response(gunicorn_error: bytes) -> bytes:
    """gunicorn's error response rewritten as problem+json, with its status and reason, and a request ID
    of its own: the request was refused before its headers were read."""
    status_line = gunicorn_error.split(b"\r\n", 1)[0].decode("latin-1")
    _, code, reason = [*status_line.split(" ", 2), "", ""][:3]
    status = int(code) if code.isdigit() else HTTPStatus.BAD_REQUEST.value
    reason = reason or HTTPStatus(status).phrase
    server_error = status >= 500
    request_id = request_id_new()
    body = json.dumps(
        {
            "type": "about:blank",
            "title": reason,
            "status": status,
            "code": "internal_error" if server_error else "invalid_request",
            "detail": "The server failed to answer this request."
            if server_error
            else f"The request was refused before it reached the service: {reason.lower()}.",
            "request_id": request_id,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/problem+json\r\n"
        f"{REQUEST_ID_HEADER}: {request_id}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body
