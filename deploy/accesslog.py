"""gunicorn's access log line (GUNICORN_ACCESS_LOG) for an ASGI application: written by gunicorn's own
logger (its public `access`, which custom logger classes implement too), in `access_log_format`, as
gunicorn's WSGI workers write it; uvicorn's line, in a format of its own, is off (deploy/workers.py)."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any


class AccessLogged:
    def __init__(self, app: Any, log: Any) -> None:
        """`app` an ASGI application, `log` the worker's gunicorn logger."""
        self.app = app
        self.log = log

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.monotonic()
        response = SimpleNamespace(status="-", headers=[], sent=0)

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                response.status = str(message["status"])
                response.headers = [
                    (name.decode("latin-1"), value.decode("latin-1")) for name, value in message["headers"]
                ]
            elif message["type"] == "http.response.body":
                response.sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]]
            self.log.access(response, headers, _environ(scope, headers), timedelta(seconds=time.monotonic() - started))


def _environ(scope: dict[str, Any], headers: list[tuple[str, str]]) -> dict[str, str]:
    """What gunicorn's log atoms read of a WSGI environ."""
    query = scope.get("query_string", b"").decode("latin-1")
    path = scope.get("raw_path", scope["path"].encode()).decode("latin-1")
    environ = {
        "REMOTE_ADDR": (scope.get("client") or ("-",))[0],
        "REQUEST_METHOD": scope["method"],
        "RAW_URI": f"{path}?{query}" if query else path,
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "PATH_INFO": scope["path"],
        "QUERY_STRING": query,
    }
    environ.update({f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers})
    return environ
