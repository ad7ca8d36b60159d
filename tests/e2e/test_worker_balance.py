"""Keep-alive connections opened at once end up shared out evenly between gunicorn's workers
(deploy/workers.py, deploy/connectionshares.py), as the kernel's connection table shows them, once their
clients have sent a few requests: a worker holding too many closes some after an answer, and the clients
open new ones, as HTTP clients do.

Which worker accepts a new connection is not up to the service: here, the one on the core the client is
not running on wakes first. When that is the busier one, a connection sent away comes back to it and is
sent away again at its next request, round after round; so the split is counted over the connections open
after the last round, whether or not an answer in it said Connection: close."""

from __future__ import annotations

import contextlib
import http.client
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.server import database_url_for_tests, gunicorn, wait_until, worker_pids

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WORKERS, CONNECTIONS, ROUNDS = 2, 16, 5
# Rounds of one request per connection, at most, before the connections are counted; fewer when a round
# closes none.
MOST_REQUEST_ROUNDS = 50
# A worker takes a connection while the other's count is not yet published: one apart either way at most.
MOST_APART = 2
ESTABLISHED = "01"


def server_side_inodes(port: int) -> set[str]:
    """The socket inodes of established TCP connections whose local end is `port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == ESTABLISHED:
                    inodes.add(fields[9])
    return inodes


def connections_by_worker(pids: list[int], port: int) -> list[int]:
    inodes = server_side_inodes(port)
    counts = []
    for pid in pids:
        held = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    held += 1
        counts.append(held)
    return counts


@contextlib.contextmanager
def connections_opened(port: int, count: int) -> Iterator[int]:
    """`count` connections opened at once, each sending /healthz until a round of requests in which no answer
    closed its connection, or MOST_REQUEST_ROUNDS; yields how many are open after the last round, and keeps
    them open. A client whose connection the server closed opens a new one at its next request."""
    clients = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(count)]
    try:
        for client in clients:
            client.connect()
        for _ in range(MOST_REQUEST_ROUNDS):
            closed = 0
            for client in clients:
                client.request("GET", "/healthz")
                response = client.getresponse()
                response.read()
                assert response.status == 200, "every /healthz answered"
                closed += response.will_close
            if not closed:
                break
        yield count - closed
    finally:
        for client in clients:
            client.close()


def test_keepalive_connections_opened_at_once__split_evenly_between_workers():
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": "e2e-balance-not-secret"}
    with gunicorn(env=env, workers=WORKERS) as (base_url, process):
        port = int(base_url.rsplit(":", 1)[1])
        pids = sorted(wait_until(lambda: len(found := worker_pids(process.pid)) == WORKERS and found, timeout=15))
        splits = []
        for _ in range(ROUNDS):
            with connections_opened(port, CONNECTIONS) as still_open:
                split = wait_until(
                    lambda: (counts := connections_by_worker(pids, port)) and sum(counts) == still_open and counts,
                    timeout=10,
                )
                splits.append(split)
            wait_until(lambda: sum(connections_by_worker(pids, port)) == 0, timeout=10)
    assert all(max(split) - min(split) <= MOST_APART for split in splits), splits
