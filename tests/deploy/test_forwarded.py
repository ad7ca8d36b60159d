"""deploy/forwarded.py: X-Forwarded-Proto believed from the proxy's addresses and over a unix socket only."""

from __future__ import annotations

import asyncio

import pytest

from deploy.forwarded import ForwardedScheme

SECURE = {"X-FORWARDED-PROTO": "https"}


def scheme_seen(client, headers: list[tuple[bytes, bytes]]) -> str:
    seen = {}

    async def app(scope, receive, send):
        seen["scheme"] = scope["scheme"]

    middleware = ForwardedScheme(app, headers=SECURE, allowed=["127.0.0.1", "10.0.0.0/8"])
    asyncio.run(middleware({"type": "http", "scheme": "http", "client": client, "headers": headers}, None, None))
    return seen["scheme"]


@pytest.mark.parametrize(
    ("client", "headers", "expected"),
    [
        (("127.0.0.1", 5000), [(b"x-forwarded-proto", b"https")], "https"),
        (("10.1.2.3", 5000), [(b"x-forwarded-proto", b"HTTPS")], "https"),
        # A unix socket: no address, and only who may open the socket file connects.
        (None, [(b"x-forwarded-proto", b"https")], "https"),
        (("192.0.2.7", 5000), [(b"x-forwarded-proto", b"https")], "http"),
        (("127.0.0.1", 5000), [(b"x-forwarded-proto", b"http")], "http"),
        (("127.0.0.1", 5000), [(b"x-forwarded-ssl", b"on")], "http"),
    ],
    ids=["proxy", "proxy-network", "unix-socket", "other-peer", "said-http", "other-header"],
)
def test_forwarded_scheme__header_believed_only_from_the_proxy(client, headers, expected):
    assert scheme_seen(client, headers) == expected
