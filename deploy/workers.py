"""The gunicorn worker of deploy/gunicorn.conf.py: uvicorn's worker (uvicorn-worker), on uvloop and
httptools, serving config.asgi, with gunicorn's limits on the request line and headers and every refusal
of the server's own in the API's problem+json.

Why uvicorn rather than gunicorn's threads: the edge answers its paths on the event
loop (core/edge/asgi.py), so a small request costs no thread handover, and the
parsing of HTTP is httptools' (C) rather than Python's (bench/results/summary.md).
Why not gunicorn's own ASGI worker: it writes its refusals as text/plain from a
private method; uvicorn takes its HTTP protocol from its configuration, a class
whose public send_400_response is overridden here.

Limits: uvicorn does not apply gunicorn's limit_request_line, limit_request_fields
and limit_request_field_size; the protocol does, from gunicorn's settings, and
answers 414 or 431 as gunicorn would.

Connections shared out: every worker's event loop accepts from the one listening
socket, and accepts every connection waiting when it wakes, so connections
opened at once (the proxy's upstream pool, a load generator's) can all go to one
worker and stay there while the other's core idles. A worker that holds more
than ALLOWED_EXCESS connections beyond the worker holding fewest
(deploy/connectionshares.py) answers the next request on one of them with
`Connection: close`: the client opens a new one, which the less busy worker is
the likelier to accept, until the counts are even. Which worker accepts is the
kernel's and the scheduler's choice: a connection that lands on the same worker
again is sent away again at its next request. No request is refused or cut off.

Recycling (max_requests) and stopping: uvicorn closes an idle keep-alive
connection at once, and one whose answer has begun right after it, though that
answer's head told the client to keep it; a request the client had sent on it
meanwhile is lost (wrk counts read errors; a proxy answers 502 to a POST). Here
every connection is given SHUTDOWN_GRACE_SECONDS: a request that arrives is
answered, with `Connection: close`, and the connection closed after it.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker

from core.middleware.requestid import REQUEST_ID_HEADER, request_id_new
from deploy.accesslog import AccessLogged
from deploy.connectionshares import ConnectionShares
from deploy.forwarded import ForwardedScheme

# Made in the master, as gunicorn imports the worker class, so every worker it forks shares it; one slot per
# worker, up to the most GUNICORN_WORKERS allows (deploy/gunicorn.conf.py).
SHARES = ConnectionShares(slots=256)
# More than the fewest another worker holds by this many, and a worker sends its clients elsewhere.
ALLOWED_EXCESS = 1
# Long enough for a request already on its way (a client's next one, sent as the last answer arrived), short
# enough that the other workers serve alone only briefly: gunicorn replaces a worker once it has exited.
SHUTDOWN_GRACE_SECONDS = 0.25


@dataclass(frozen=True)
class RequestLimits:
    # gunicorn's settings of the same names (0: no limit).
    line: int
    fields: int
    field_size: int


class _Refused(Exception):
    """Raised in a parser callback to stop the parser; the protocol answers the refusal it noted."""


class WorkerShare:
    """This worker's slot in SHARES and the connections it holds."""

    def __init__(self) -> None:
        self.slot: int | None = None
        self.held = 0

    def add(self, change: int) -> None:
        self.held += change
        if self.slot is not None:
            SHARES.hold(self.slot, self.held)

    def in_excess(self) -> bool:
        fewest = None if self.slot is None else SHARES.fewest_elsewhere(self.slot)
        return fewest is not None and self.held - fewest > ALLOWED_EXCESS


class ServiceProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with gunicorn's request limits and problem+json refusals, the worker's
    connections counted and shared out, and idle connections given a grace when the server stops."""

    limits = RequestLimits(line=4094, fields=100, field_size=8190)
    share = WorkerShare()
    closing = False

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.share.add(1)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.share.add(-1)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self.closing or self.share.in_excess():
            self.cycle.keep_alive = False

    def shutdown(self) -> None:
        # Every answer from now on says Connection: close, and the connection closes after it.
        self.closing = True
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            cycle.keep_alive = False
        self.loop.call_later(SHUTDOWN_GRACE_SECONDS, self._grace_over)

    def _grace_over(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        elif not cycle.response_started:
            cycle.keep_alive = False
        else:
            # An answer whose head went out saying keep-alive: the client may send another request after it,
            # which is answered, with Connection: close.
            self.loop.call_later(SHUTDOWN_GRACE_SECONDS, self._grace_over)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.refusal: HTTPStatus | None = None
        self.header_count = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if self.limits.line and len(self.url) > self.limits.line:
            self._refuse(HTTPStatus.REQUEST_URI_TOO_LONG)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self.header_count += 1
        if self.limits.fields and self.header_count > self.limits.fields:
            self._refuse(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        if self.limits.field_size and len(name) + len(value) + 2 > self.limits.field_size:
            self._refuse(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)

    def _refuse(self, status: HTTPStatus) -> None:
        self.refusal = status
        raise _Refused(status.phrase)

    def send_400_response(self, msg: str) -> None:
        status = getattr(self, "refusal", None) or HTTPStatus.BAD_REQUEST
        self.transport.write(problem_response(status))
        self.transport.close()


def problem_response(status: HTTPStatus) -> bytes:
    """A whole HTTP response refusing a request before it reached the service, as problem+json, with a request
    ID of its own: the request's headers were never read."""
    request_id = request_id_new()
    body = json.dumps(
        {
            "type": "about:blank",
            "title": status.phrase,
            "status": status.value,
            "code": "invalid_request",
            "detail": f"The request was refused before it reached the service: {status.phrase.lower()}.",
            "request_id": request_id,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/problem+json\r\n"
        f"{REQUEST_ID_HEADER}: {request_id}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class ServiceWorker(UvicornWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before uvicorn's settings (CONFIG_KWARGS) are read.
        self.share = WorkerShare()
        super().__init__(*args, **kwargs)

    def init_process(self) -> None:
        self.share.slot = SHARES.claim(os.getpid())
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        cfg = self.cfg
        if cfg.secure_scheme_headers:
            self.wsgi = ForwardedScheme(self.wsgi, headers=cfg.secure_scheme_headers, allowed=cfg.forwarded_allow_ips)
        if cfg.accesslog is not None:
            self.wsgi = AccessLogged(self.wsgi, self.log)

    def run(self) -> None:
        try:
            super().run()
        finally:
            if self.share.slot is not None:
                SHARES.release(self.share.slot)

    async def callback_notify(self) -> None:
        """uvicorn's call every `self.timeout` seconds: gunicorn's heartbeat, and, as gunicorn's own workers
        do, a stop when the master is gone (killed, out of memory). uvicorn's worker does not check: an
        orphaned worker kept the listening socket and its database connections, with no master to stop or
        replace it, and a new master could not bind the address."""
        if self.ppid != os.getppid():
            self.log.info("Parent changed, shutting down: %s", self)
            # uvicorn's own handler: the graceful stop a master's SIGTERM starts.
            os.kill(os.getpid(), signal.SIGTERM)
            return
        await super().callback_notify()

    @property
    def CONFIG_KWARGS(self) -> dict[str, Any]:
        cfg = self.cfg
        limits = RequestLimits(
            line=cfg.limit_request_line, fields=cfg.limit_request_fields, field_size=cfg.limit_request_field_size
        )
        return {
            "loop": "uvloop",
            "http": type("ConfiguredProtocol", (ServiceProtocol,), {"limits": limits, "share": self.share}),
            # The application closes its database pool when the server stops.
            "lifespan": "on",
            # gunicorn's line instead, when asked for (load_wsgi).
            "access_log": False,
            # gunicorn's rule instead (load_wsgi).
            "proxy_headers": False,
        }
