"""Client processes sending assignment requests until told to stop, keeping every answer.

bench/load.py measures a fixed window for throughput. The reliability
experiments instead change the world while the load runs (the database stops,
minutes pass) and judge each request by when it was sent, so here every request
leaves a record: its start (CLOCK_MONOTONIC, the same clock in every process),
latency, status, problem code and Retry-After. The variant every 200 gave each
subject is kept too, so an experiment can tell whether a subject was ever given
two. Processes, not threads, for the reason bench/load.py gives.

Like the proxy in front of a deployment (deploy/proxy/nginx.conf.template:
proxy_next_upstream error ... non_idempotent, 2 tries), a request whose kept
connection the server closed before answering (a worker that was recycled or
stopped) is sent once more on a new connection; those retries are counted.
"""

from __future__ import annotations

import http.client
import json
import math
import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from bench.scenarios import EXPERIMENT_ID

PATH = "/experiment-assignments"
# The most subject IDs one request may carry (ASSIGNMENT_MAX_SUBJECTS' default).
MAX_SUBJECTS = 1000
# Longer than gunicorn's worker timeout (30 s): the server, not the client, gives up first.
HTTP_TIMEOUT = 60.0
READY_SECONDS = 120
# A kept connection the server closed: the request never reached the application.
CLOSED_BY_SERVER = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class Plan(Protocol):
    """The subject IDs of one client's requests, one batch per request."""

    def batch(self) -> list[str]: ...


class Record(NamedTuple):
    started: float
    seconds: float
    status: int  # 0: no HTTP answer
    code: str  # the problem's `code`, the exception's name without an answer, "" for a good 200
    retry_after: str

    @property
    def ended(self) -> float:
        return self.started + self.seconds

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.code


def outcome(record: Record) -> str:
    """What a client saw, in words: `200`, `503 database_unavailable, Retry-After 5`, `no answer: ...`."""
    if record.status == 0:
        return f"no answer: {record.code}"
    text = f"{record.status} {record.code}".rstrip()
    return f"{text}, Retry-After {record.retry_after}" if record.retry_after else text


def outcomes(records: Iterable[Record]) -> dict[str, int]:
    return dict(Counter(outcome(record) for record in records).most_common())


def latency_ms(records: Iterable[Record]) -> dict[str, float | None]:
    """Nearest-rank p50 and p99, and the maximum, in milliseconds."""
    values = sorted(record.seconds * 1000 for record in records)

    def rank(share: float) -> float | None:
        return values[max(1, math.ceil(share * len(values))) - 1] if values else None

    return {"p50": rank(0.50), "p99": rank(0.99), "max": values[-1] if values else None}


def request_body(subject_ids: list[str]) -> bytes:
    return json.dumps({"experiment_id": EXPERIMENT_ID, "subject_ids": subject_ids}).encode()


class Connection:
    """One kept HTTP/1.1 connection to one server, reopened when the server closes it."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host = host
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.http: http.client.HTTPConnection | None = None
        self.used = False
        self.retries = 0

    def post(self, body: bytes) -> tuple[int, str, bytes]:
        """Status, Retry-After and body of POST /experiment-assignments."""
        while True:
            if self.http is None:
                self.http = http.client.HTTPConnection(self.host, self.port, timeout=HTTP_TIMEOUT)
                self.used = False
            reused = self.used
            try:
                self.http.request("POST", PATH, body=body, headers=self.headers)
                response = self.http.getresponse()
                content = response.read()
            except CLOSED_BY_SERVER:
                self.close()
                if not reused:
                    raise
                self.retries += 1
                continue
            except (OSError, http.client.HTTPException):
                self.close()
                raise
            self.used = True
            if response.will_close:
                self.close()
            return response.status, response.getheader("Retry-After") or "", content

    def close(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None


def assignments_ask(address: tuple[str, int], token: str, subject_ids: list[str]) -> dict[str, str]:
    """The service's answer for each subject, MAX_SUBJECTS per request; raises unless every answer is 200."""
    connection = Connection(*address, token)
    answers: dict[str, str] = {}
    try:
        for start in range(0, len(subject_ids), MAX_SUBJECTS):
            status, _, content = connection.post(request_body(subject_ids[start : start + MAX_SUBJECTS]))
            if status != 200:
                raise RuntimeError(f"POST {PATH} answered {status}: {content[:300]!r}")
            answers.update(json.loads(content)["assignments"])
    finally:
        connection.close()
    return answers


@dataclass
class Answers:
    """Per subject, the first variant answered and when; subjects answered with more than one variant."""

    first: dict[str, tuple[str, float]] = field(default_factory=dict)
    conflicts: dict[str, set[str]] = field(default_factory=dict)

    def add(self, subject_id: str, variant: str, at: float) -> None:
        known = self.first.get(subject_id)
        if known is None:
            self.first[subject_id] = (variant, at)
        elif known[0] != variant:
            self.conflicts.setdefault(subject_id, {known[0]}).add(variant)
        elif at < known[1]:
            self.first[subject_id] = (variant, at)

    def merge(self, other: Answers) -> None:
        for subject_id, (variant, at) in other.first.items():
            self.add(subject_id, variant, at)
        for subject_id, variants in other.conflicts.items():
            self.conflicts.setdefault(subject_id, set()).update(variants)

    @classmethod
    def after(cls, assigned: dict[str, str], answers: Answers) -> Answers:
        """The answers of `assigned`, given before the load (at time 0), then `answers`."""
        merged = cls()
        for subject_id, variant in assigned.items():
            merged.add(subject_id, variant, 0.0)
        merged.merge(answers)
        return merged


@dataclass
class ClientReport:
    records: list[Record] = field(default_factory=list)
    answers: Answers = field(default_factory=Answers)
    # Per subject, when this client's first request for it was sent and answered.
    first_asked: dict[str, tuple[float, float]] = field(default_factory=dict)
    retries: int = 0
    crash: str | None = None


def _answer(status: int, content: bytes, subject_ids: list[str]) -> tuple[str, dict[str, str]]:
    """The record's code and, for a good 200, its assignments."""
    try:
        document = json.loads(content)
    except ValueError:
        return "not_json", {}
    if status != 200:
        return str(document.get("code", "no_code")) if isinstance(document, dict) else "no_code", {}
    assignments = document.get("assignments", {}) if isinstance(document, dict) else {}
    if assignments.keys() != set(subject_ids):
        return "wrong_subjects", {}
    return "", assignments


def _client(index: int, make_plan, addresses, token: str, ready, stop, last_ok, queue) -> None:
    report = ClientReport()
    connections: list[Connection] = []
    try:
        try:
            plan = make_plan(index)
            connections = [Connection(host, port, token) for host, port in addresses]
            pick = random.Random(index)
        finally:
            ready.wait(timeout=READY_SECONDS)
        while not stop.is_set():
            subject_ids = plan.batch()
            connection = connections[pick.randrange(len(connections))]
            failure = ""
            started = time.monotonic()
            try:
                status, retry_after, content = connection.post(request_body(subject_ids))
            except (OSError, http.client.HTTPException) as error:
                status, retry_after, content, failure = 0, "", b"", type(error).__name__
            ended = time.monotonic()
            code, assignments = (failure, {}) if failure else _answer(status, content, subject_ids)
            report.records.append(Record(started, ended - started, status, code, retry_after))
            for subject_id in subject_ids:
                report.first_asked.setdefault(subject_id, (started, ended))
            if assignments:
                last_ok[index] = ended
                for subject_id, variant in assignments.items():
                    report.answers.add(subject_id, variant, ended)
    except Exception as error:
        report.crash = f"{type(error).__name__}: {error}"[:500]
    finally:
        for connection in connections:
            report.retries += connection.retries
            connection.close()
        queue.put(report)


@dataclass
class TrafficResult:
    began: float
    ended: float
    records: list[Record]  # by start time
    answers: Answers
    asked: set[str]
    # Subjects that requests from two or more clients carried at once, before any answer for them
    # arrived: the subjects whose first assignment was raced for.
    contested: int
    retries: int

    @property
    def seconds(self) -> float:
        return self.ended - self.began

    def errors(self) -> list[Record]:
        return [record for record in self.records if not record.ok]

    def summary(self) -> dict[str, Any]:
        """The figures every experiment reports about its load."""
        return {
            "seconds": self.seconds,
            "requests": len(self.records),
            "requests_per_second": len(self.records) / self.seconds,
            "errors": len(self.errors()),
            "outcomes": outcomes(self.records),
            "retried_on_closed_connection": self.retries,
            "latency_ms": latency_ms(self.records),
        }


def _raced(spans: list[tuple[float, float]]) -> bool:
    """Whether two of these first requests for a subject were sent before the earliest of them was answered."""
    answered = min(end for _, end in spans)
    return sum(start < answered for start, _ in spans) >= 2


class Traffic:
    """`clients` processes, each sending its plan's batches to servers picked at random, from
    entering the block until leaving it; then `result` holds what they saw.

    Entering returns once every client is ready to send; leaving lets each finish the request
    it is waiting for.
    """

    def __init__(
        self, *, make_plan: Callable[[int], Plan], addresses: list[tuple[str, int]], token: str, clients: int
    ) -> None:
        context = multiprocessing.get_context("fork")
        self._queue = context.Queue()
        self._ready = context.Barrier(clients + 1)
        self._stop = context.Event()
        self._last_ok = context.Array("d", clients, lock=False)
        self._processes = [
            context.Process(
                target=_client,
                args=(index, make_plan, addresses, token, self._ready, self._stop, self._last_ok, self._queue),
                daemon=True,
            )
            for index in range(clients)
        ]
        self.began = 0.0
        self.result: TrafficResult | None = None

    def __enter__(self) -> Traffic:
        for process in self._processes:
            process.start()
        self._ready.wait(timeout=READY_SECONDS)
        self.began = time.monotonic()
        return self

    def last_ok(self) -> float:
        """When the latest good 200 arrived (monotonic; 0.0 before the first)."""
        return max(self._last_ok)

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._stop.set()
        ended = time.monotonic()
        if exc_type is not None:
            for process in self._processes:
                process.kill()
            return
        # Read before joining: a child blocks on exit until its queued report is taken.
        reports: list[ClientReport] = [self._queue.get(timeout=HTTP_TIMEOUT * 2) for _ in self._processes]
        for process in self._processes:
            process.join(timeout=30)
        crashes = [report.crash for report in reports if report.crash]
        if crashes:
            raise RuntimeError(f"{len(crashes)} load clients failed; the first: {crashes[0]}")
        answers = Answers()
        first_asked: dict[str, list[tuple[float, float]]] = {}
        for report in reports:
            answers.merge(report.answers)
            for subject_id, span in report.first_asked.items():
                first_asked.setdefault(subject_id, []).append(span)
        self.result = TrafficResult(
            began=self.began,
            ended=ended,
            records=sorted((record for report in reports for record in report.records), key=lambda r: r.started),
            answers=answers,
            asked=set(first_asked),
            contested=sum(_raced(spans) for spans in first_asked.values()),
            retries=sum(report.retries for report in reports),
        )


class MixedPlan:
    """Single-subject requests, half for a subject never asked before, half for one of `existing`
    (assigned before the load began): the common request of a deployment, both of its paths."""

    def __init__(self, *, prefix: str, existing: list[str], seed: str) -> None:
        self.prefix = prefix
        self.existing = existing
        self.counter = 0
        self.random = random.Random(seed)

    def batch(self) -> list[str]:
        if self.random.random() < 0.5:
            return [self.random.choice(self.existing)]
        self.counter += 1
        return [f"{self.prefix}-{self.counter:09d}"]
