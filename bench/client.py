"""The service's load worker: POST /experiment-assignments over HTTP/1.1 with a proxy token.

http.client keeps the connection open when the server lets it; gunicorn's sync
workers answer `Connection: close`, so there each request opens a new loopback
connection, as it would behind a proxy that does not pool upstream connections.
"""

from __future__ import annotations

import http.client
import json

from bench.scenarios import EXPERIMENT_ID, SubjectIds

PATH = "/experiment-assignments"


class UnexpectedAnswer(Exception):
    pass


class ServiceWorker:
    def __init__(self, *, host: str, port: int, token: str, subject_ids: SubjectIds) -> None:
        self.connection = http.client.HTTPConnection(host, port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.subject_ids = subject_ids

    def prepare(self) -> tuple[list[str], bytes]:
        ids = self.subject_ids.next_batch()
        return ids, json.dumps({"experiment_id": EXPERIMENT_ID, "subject_ids": ids}).encode()

    def send(self, request: tuple[list[str], bytes]) -> tuple[int, bytes]:
        self.connection.request("POST", PATH, body=request[1], headers=self.headers)
        response = self.connection.getresponse()
        return response.status, response.read()

    def check(self, request: tuple[list[str], bytes], answer: tuple[int, bytes]) -> int:
        status, body = answer
        if status != 200:
            raise UnexpectedAnswer(f"HTTP {status}: {body[:300]!r}")
        assignments = json.loads(body)["assignments"]
        expected = set(request[0])
        if assignments.keys() != expected:
            raise UnexpectedAnswer(f"{len(assignments)} assignments for {len(expected)} subjects")
        return len(expected)

    def close(self) -> None:
        self.connection.close()
