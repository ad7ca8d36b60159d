"""The ASGI application: the edge's paths answered by their endpoints (answer.py) on the event loop, every
other request by the WSGI application (config.wsgi's, the edge's WSGI side and Django's handler) in a
fixed pool of threads.

On PostgreSQL the endpoints' steps are sent by the pool's driver (pool.py): a
request needs no thread unless a cache misses. Where the endpoint's statements take
another form (SQLite, Citus: JsonApiView.vendor, asked once per endpoint) its
requests go to the WSGI application, which sends them on Django's connection.
/healthz is answered on the loop while the last probe's success is fresh, and
otherwise waits for the probe in threads of its own, so that a database that
hangs the other threads cannot delay it.

Why not Django's own ASGI handler for the other paths: it runs each request's
sync code in a thread of its own, which keeps no database connection from one
request to the next; the WSGI application's threads keep theirs
(DATABASE_CONN_MAX_AGE), as under a threaded server.

The body is read whole before the endpoint starts, at most one byte past the
body size limit: a body sent chunked, with no Content-Length, is then given the
length read, as the WSGI application's chunked-body wrapper does (core/api/chunked.py).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import DatabaseError
from django.http import HttpResponse

from core.edge.answer import EdgeRoutes, Endpoint, edge_answer, response_headers
from core.edge.pool import PoolDriver, in_thread
from core.middleware.requestid import request_id_begin, request_id_presented

AsgiApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]
# The endpoint's steps on the loop's pool, in the form of plain PostgreSQL.
ON_THE_LOOP = "postgresql"
# The receivers of Django's request_started and request_finished, and what a request on the loop does instead
# of sending them. tests/core/edge/test_asgi.py fails when the signals' receivers and this table differ: a
# receiver added for any reason must be placed here before the loop's requests pass it by.
SIGNALS_ACCOUNTED = {
    "django.db.close_old_connections": "keeps Django's connections, of which the loop uses none; a function step "
    "does it in its thread (pool.in_thread)",
    "django.db.reset_queries": "the queries Django logs in DEBUG, on Django's connections",
    "django.core.cache.close_caches": "Django's cache connections: the service's caches are in the process "
    "(core/cache.py)",
    "django.core.handlers.base.reset_urlconf": "a URLconf a request set for itself: the edge resolves no URL",
    "core.middleware.requestid._request_started": "request_id_begin, at the request's start",
    "core.middleware.requestid._request_finished": "the ID is the request's task's, and ends with it",
}


class EdgeAsgiApplication(EdgeRoutes):
    def __init__(
        self,
        endpoints: Mapping[str, Endpoint],
        wsgi: AsgiApp,
        *,
        prefixes: Mapping[str, Endpoint] | None = None,
        driver: PoolDriver,
        threads: Executor,
        probe_threads: Executor,
    ) -> None:
        """The routes of EdgeRoutes, by the scope's path; `wsgi` (the WSGI application, in threads) answers
        the rest. `threads` run the endpoints' function steps; `probe_threads` wait for /healthz's probe."""
        super().__init__(endpoints, prefixes=prefixes)
        self.wsgi = wsgi
        self.driver = driver
        self.threads = threads
        self.probe_threads = probe_threads
        # Endpoint -> the form of its statements (JsonApiView.vendor), asked once; the endpoints being asked,
        # and the tasks asking (held, so that they are not collected while they run).
        self.modes: dict[int, str] = {}
        self.asking: set[int] = set()
        self.tasks: set[asyncio.Task] = set()

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            return await self.lifespan(receive, send)
        endpoint = self.endpoint_for(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or not self.on_the_loop(endpoint):
            return await self.wsgi(scope, receive, send)
        body = await _body(scope, receive, limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        # Not Django's request_started: its receivers keep Django's connections (SIGNALS_ACCOUNTED), of
        # which the loop has none, and choose the request ID, chosen here in the request's own task.
        request_id_begin(request_id_presented(scope))
        request = ASGIRequest(scope, io.BytesIO(body))
        if "CONTENT_LENGTH" not in request.META:
            request.META["CONTENT_LENGTH"] = str(len(body))
        response = await self.answered(endpoint, request)
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [
                    (name.encode("latin-1"), value.encode("latin-1")) for name, value in response_headers(response)
                ],
            }
        )
        # Nor request_finished, on closing the response, which holds no resource: the request ID goes with the
        # task.
        await send({"type": "http.response.body", "body": response.content})

    async def answered(self, endpoint: Endpoint, request: ASGIRequest) -> HttpResponse:
        executor = self.threads if endpoint.vendor is not None else self.probe_threads
        return await self.driver.run(
            edge_answer(endpoint, request, vendor=self.modes.get(id(endpoint))), executor=executor
        )

    def on_the_loop(self, endpoint: Endpoint) -> bool:
        """Whether the endpoint's requests are answered here: it sends no statement of its own, or sends them
        in the form of plain PostgreSQL, as its view says once asked (in a thread, on Django's connection).
        Until the view has said, its requests go to the WSGI application, and no request waits for the asking:
        a database that cannot be asked is asked again by the next request."""
        if endpoint.vendor is None:
            return True
        key = id(endpoint)
        vendor = self.modes.get(key)
        if vendor is None and key not in self.asking:
            self.asking.add(key)
            task = asyncio.get_running_loop().create_task(self._ask(key, endpoint.vendor))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return vendor == ON_THE_LOOP

    def ask_every_endpoint(self) -> None:
        """Start asking every endpoint's view, as the server starts, so that its first requests find out."""
        for endpoint in self.all():
            self.on_the_loop(endpoint)

    async def asked(self) -> None:
        """Once the asking started so far has ended (a test's client; the server never waits for it)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks))

    async def _ask(self, key: int, vendor: Callable[[], str]) -> None:
        try:
            self.modes[key] = await in_thread(self.threads, vendor)
        except DatabaseError:
            # Not known: the next request asks again.
            return
        finally:
            self.asking.discard(key)

    async def lifespan(self, receive: Callable, send: Callable) -> None:
        """The server's start and stop: the endpoints' views asked at the start, the pool closed at the stop, its
        connections ended cleanly."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.ask_every_endpoint()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.driver.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _body(scope: dict[str, Any], receive: Callable, *, limit: int) -> bytes:
    """The request's body, read to its end or to one byte past `limit`, whichever comes first; none read when
    its declared length is over the limit, which the endpoint refuses (body_size_problem) by that length."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            return b""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit or not message.get("more_body", False):
            break
    return b"".join(chunks)[: limit + 1]
