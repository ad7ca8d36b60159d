"""The gunicorn worker of deploy/gunicorn.conf.py: gthread, with threads kept for /healthz,
and gunicorn's own error answers in the API's problem+json.

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

Errors: gunicorn answers what it refuses before the application sees it (a
request line or header block over the limits, a malformed request) with an HTML
page. The same answers leave here as problem+json, as every other error does.
"""

from __future__ import annotations

import json
import selectors
import socket
import time
from concurrent import futures
from functools import partial
from http import HTTPStatus

from gunicorn.workers.gthread import ThreadWorker

from core.middleware.requestid import REQUEST_ID_HEADER, request_id_new

HEALTH_CHECK_STARTS = (b"GET /healthz", b"HEAD /healthz")
HEALTH_THREADS = 2
_PEEK_BYTES = max(len(start) for start in HEALTH_CHECK_STARTS)


def request_start(conn) -> bytes | None:
    """The first bytes of the connection's next request, without consuming them; None if none arrived yet."""
    if conn.initialized:
        # Bytes gunicorn already read ahead (the next request behind a drained body).
        buffered = conn.parser.unreader.buf.getvalue()
        if buffered:
            return buffered[:_PEEK_BYTES]
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
        super().init_process()

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
