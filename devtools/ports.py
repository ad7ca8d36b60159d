"""Local TCP ports for servers started by tests, benchmarks and scripts."""

from __future__ import annotations

import contextlib
import socket
import time


def free_port() -> int:
    """A port nothing listens on now; the kernel picks it, so parallel runs do not collide (a small race
    remains until the server binds it, which no fixed port avoids either)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_range(count: int) -> int:
    """The first of `count` consecutive ports nothing listens on now, for servers that take consecutive ports
    (a Citus cluster); the same small race as free_port's."""
    while True:
        first = free_port()
        if first + count <= 65536 and all(_bindable(port) for port in range(first + 1, first + count)):
            return first


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_port(port: int, *, timeout: float = 20.0) -> None:
    """Until something accepts connections on 127.0.0.1:port; TimeoutError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")
