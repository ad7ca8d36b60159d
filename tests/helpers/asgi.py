"""An in-process client of the ASGI application gunicorn serves (config.asgi), made afresh for a test: its
database pool sees what the test committed, never its transaction (django_db(transaction=True))."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
from django.db import connection

from tests.helpers.api import WsgiResponse
from tests.helpers.server import database_url_for_tests


class AsgiClient:
    """HTTP calls, with a token, to an application made as config.asgi makes it (served_application), on an
    event loop of its own that lives as long as the client (the pool's connections belong to it). The methods
    take what ApiClient's take; `headers` are added as they are."""

    def __init__(self, token: str | None) -> None:
        from config.asgi import served_application

        self.app = served_application()
        self.token = token
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.started())

    async def started(self) -> None:
        """As the server starts, and what each endpoint's view says known before the first request."""
        self.app.ask_every_endpoint()
        await self.app.asked()

    def close(self) -> None:
        """The pool closed, and the connections of the application's threads, which outlive it, ended: the
        test database is dropped at the end of the run."""
        self.loop.run_until_complete(self.app.driver.close())
        self.loop.close()
        if connection.vendor != "postgresql":
            return
        with psycopg.connect(database_url_for_tests(), autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> ALL(%s)",
                [[connection.connection.info.backend_pid] if connection.connection else []],
            )

    def request(
        self, method: str, path: str, data: Any = b"", *, headers: dict[str, str] | None = None, chunked: bool = False
    ) -> WsgiResponse:
        text = data if isinstance(data, (str, bytes)) else json.dumps(data)
        body = text.encode() if isinstance(text, str) else text
        sent = {"host": "testserver", **({"authorization": f"Bearer {self.token}"} if self.token else {})}
        if chunked:
            sent["transfer-encoding"] = "chunked"
        elif body:
            sent["content-length"] = str(len(body))
        sent.update({name.lower(): value for name, value in (headers or {}).items()})
        path, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in sent.items()],
            "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80),
        }
        # A chunked body arrives in pieces, as the server de-chunks it, with no Content-Length.
        pieces = [body[i : i + 1000] for i in range(0, len(body), 1000)] if chunked else [body]
        messages = [
            {"type": "http.request", "body": piece, "more_body": number < len(pieces) - 1}
            for number, piece in enumerate(pieces)
        ]
        started: dict[str, Any] = {}
        content: list[bytes] = []

        async def receive() -> dict:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            else:
                content.append(message.get("body", b""))

        self.loop.run_until_complete(self.app(scope, receive, send))
        status = started["status"]
        answer_headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in started["headers"]]
        return WsgiResponse(f"{status} ", answer_headers, b"".join(content))

    def post(self, path: str, data: Any = b"", **options: Any) -> WsgiResponse:
        options["headers"] = {"content-type": "application/json", **options.get("headers", {})}
        return self.request("POST", path, data, **options)

    def get(self, path: str, **options: Any) -> WsgiResponse:
        return self.request("GET", path, **options)
