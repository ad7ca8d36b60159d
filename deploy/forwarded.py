"""Whether a request came over HTTPS, by gunicorn's rule, for an ASGI application: a header of
`secure_scheme_headers` (X-Forwarded-Proto: https, deploy/gunicorn.conf.py) is believed only from a peer in
`forwarded_allow_ips`, or over a unix socket, whose peer gunicorn believes too. uvicorn's own proxy
headers are off (deploy/workers.py): they would also take the client's address from X-Forwarded-For, and
never believe a unix socket's peer."""

from __future__ import annotations

import ipaddress
from typing import Any


class ForwardedScheme:
    def __init__(self, app: Any, *, headers: dict[str, str], allowed: list[str]) -> None:
        """`headers` gunicorn's secure_scheme_headers (name: the value that means HTTPS), `allowed` its
        forwarded_allow_ips."""
        self.app = app
        self.headers = {name.lower().encode("latin-1"): value.lower() for name, value in headers.items()}
        self.anyone = "*" in allowed
        self.networks = [ipaddress.ip_network(address, strict=False) for address in allowed if address != "*"]

    def trusted(self, client: tuple[str, int] | None) -> bool:
        if client is None or self.anyone:
            return True
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.trusted(scope.get("client")):
            for name, value in scope["headers"]:
                secure = self.headers.get(name)
                if secure is not None:
                    scope = {**scope, "scheme": "https" if value.decode("latin-1").lower() == secure else "http"}
        await self.app(scope, receive, send)
