"""The minimal app as ASGI: bench/minimal_app.py's answers, on a psycopg async connection pool.

The same routes, checks and answers as the WSGI minimal app (its
answer_without_body and answer_steps: the token compared with BENCH_TOKEN,
/healthz touching no database), and the same statements, sent by
bench/baseline.py's steps_run_async on a connection of a
psycopg_pool.AsyncConnectionPool per worker process: autocommit, psycopg's
default binding (parameters bound by the server, each statement prepared from
its fifth run on a connection), as the WSGI app's per-thread connections. The
experiments and subject types are read once per process, on the first request
that needs them.

bench/run hot-path serves it with gunicorn's ASGI worker (`-k asgi`, uvloop:
target minimal-asgi) and with uvicorn (uvloop, httptools: minimal-uvicorn). The
pool opens at the ASGI lifespan's startup (or on the first request of a server
without one) with BENCH_POOL_SIZE connections, and closes at its shutdown. Not for
a Citus database: storage_citus.py's shard-by-shard statements take sync callbacks.
"""

from __future__ import annotations

import asyncio
import os

import psycopg
from psycopg_pool import AsyncConnectionPool

from bench.baseline import assignments_distributed, steps_run_async
from bench.minimal_app import answer_headers, answer_steps, answer_without_body, encoded

# Connections per worker process: as many as a service worker has by default, so each process can have as
# many statements in flight (bench/run hot-path sets it to the service's DATABASE_POOL_SIZE).
POOL_SIZE = int(os.environ.get("BENCH_POOL_SIZE", "4"))
HEADERS = [(b"content-type", b"application/json")]

_pool: AsyncConnectionPool | None = None
_opening = asyncio.Lock()


async def _pool_opened() -> AsyncConnectionPool:
    global _pool
    async with _opening:
        if _pool is None:
            # Asked once, on a connection of its own: the pool's connections then send the hot path's statements only.
            with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as connection:
                if assignments_distributed(connection):
                    raise RuntimeError("bench/minimal_asgi.py does not run on Citus (sync-only shard statements)")
            pool = AsyncConnectionPool(
                os.environ["DATABASE_URL"],
                min_size=POOL_SIZE,
                max_size=POOL_SIZE,
                kwargs={"autocommit": True},
                open=False,
            )
            await pool.open(wait=True)
            _pool = pool
    return _pool


async def _lifespan(receive, send) -> None:
    global _pool
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await _pool_opened()
            except Exception as error:
                await send({"type": "lifespan.startup.failed", "message": str(error)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if _pool is not None:
                await _pool.close()
                _pool = None
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            # The client left: no answer will be read.
            raise ConnectionResetError("the client disconnected")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def application(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        raise ValueError(f"no {scope['type']} here")
    path = scope["path"]
    authorization = next(
        (value.decode("latin-1") for name, value in scope["headers"] if name == b"authorization"), None
    )
    answer = answer_without_body(scope["method"], path, authorization)
    if answer is None:
        body = await _body(receive)
        pool = _pool or await _pool_opened()
        async with pool.connection() as connection:
            answer = await steps_run_async(connection, answer_steps(path, lambda: body, distributed=False))
    status, content = answer[0], encoded(answer[1])
    extra = [(name.lower().encode(), value.encode()) for name, value in answer_headers(path, status, content)]
    await send(
        {
            "type": "http.response.start",
            "status": int(status.split(" ", 1)[0]),
            "headers": [*HEADERS, (b"content-length", str(len(content)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": content})
