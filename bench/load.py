"""The load driver: C worker processes, each with one connection, for a fixed time.

A worker is any object with `prepare()` (builds the next request, untimed),
`send(request)` (the timed part: what a caller of the service waits for) and
`check(request, answer)` (untimed; raises when the answer is wrong). Processes,
not threads: each worker gets its own interpreter, so the driver's Python does
not serialise the requests it is measuring on one GIL.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

# The longest a worker process may take to start and connect.
READY_SECONDS = 120


class Worker(Protocol):
    def prepare(self) -> Any: ...

    def send(self, request: Any) -> Any: ...

    def check(self, request: Any, answer: Any) -> int: ...

    def close(self) -> None: ...


@dataclass
class WorkerReport:
    sent: int = 0  # every request, warm-up included: divides the server's transaction count
    measured: int = 0
    subjects: int = 0
    errors: int = 0
    first_error: str | None = None
    cpu_seconds: float = 0.0
    latencies: array = field(default_factory=lambda: array("d"))


@dataclass
class LoadResult:
    duration: float
    sent: int
    requests: int
    subjects: int
    errors: int
    first_error: str | None
    client_cpu_seconds: float
    latencies: list[float]
    # Percentiles a load generator computed itself (wrk.py), by share: they stand for the latencies it keeps.
    percentiles: dict[float, float] = field(default_factory=dict)

    def percentile(self, share: float) -> float | None:
        """Nearest-rank percentile of the measured latencies, in seconds."""
        if share in self.percentiles:
            return self.percentiles[share]
        if not self.latencies:
            return None
        rank = max(1, math.ceil(share * len(self.latencies)))
        return self.latencies[rank - 1]


def _work(make_worker: Callable[[int], Worker], index: int, ready, go, window, release, queue) -> None:
    report = WorkerReport()
    worker = None
    try:
        try:
            worker = make_worker(index)
        finally:
            ready.wait(timeout=READY_SECONDS)
        go.wait(timeout=READY_SECONDS)
        start_at, end_at = window
        while time.monotonic() < start_at:
            request = worker.prepare()
            worker.check(request, worker.send(request))
            report.sent += 1
        cpu_start = time.process_time()
        while time.monotonic() < end_at:
            request = worker.prepare()
            report.sent += 1
            started = time.perf_counter()
            try:
                answer = worker.send(request)
                elapsed = time.perf_counter() - started
                subjects = worker.check(request, answer)
            except Exception as error:
                report.errors += 1
                report.first_error = report.first_error or f"{type(error).__name__}: {error}"[:500]
                continue
            report.latencies.append(elapsed)
            report.measured += 1
            report.subjects += subjects
        report.cpu_seconds = time.process_time() - cpu_start
    except Exception as error:
        report.errors += 1
        report.first_error = report.first_error or f"{type(error).__name__}: {error}"[:500]
    finally:
        # Connections stay open until the driver has sampled CPU at the window's end,
        # so the set of processes it samples is the same at both ends.
        release.wait(timeout=60)
        if worker is not None:
            worker.close()
        queue.put(report)


def load_run(
    *,
    make_worker: Callable[[int], Worker],
    concurrency: int,
    warmup: float,
    duration: float,
    on_start: Callable[[], None] = lambda: None,
    on_end: Callable[[], None] = lambda: None,
) -> LoadResult:
    """Run `concurrency` workers: a warm-up, then `duration` seconds measured.

    The clock starts once every worker process is started and has made its
    worker (the baseline's connects there): with many clients on few cores,
    those started first would otherwise load the machine while the rest are
    still being forked, and the window could open, even close, before all of
    them run. `on_start` and `on_end` run
    in this process at the edges of the measured window (they sample CPU counters).
    """
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    ready = context.Barrier(concurrency + 1)
    go = context.Event()
    release = context.Event()
    window = context.Array("d", 2, lock=False)
    processes = [
        context.Process(target=_work, args=(make_worker, index, ready, go, window, release, queue), daemon=True)
        for index in range(concurrency)
    ]
    for process in processes:
        process.start()
    ready.wait(timeout=READY_SECONDS)
    start_at = time.monotonic() + warmup
    end_at = start_at + duration
    window[:] = [start_at, end_at]
    go.set()
    time.sleep(max(0.0, start_at - time.monotonic()))
    on_start()
    time.sleep(max(0.0, end_at - time.monotonic()))
    on_end()
    release.set()
    # Read before joining: a child blocks on exit until its queued report is taken.
    reports = [queue.get(timeout=duration + warmup + 120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    latencies = sorted(value for report in reports for value in report.latencies)
    return LoadResult(
        duration=duration,
        sent=sum(report.sent for report in reports),
        requests=sum(report.measured for report in reports),
        subjects=sum(report.subjects for report in reports),
        errors=sum(report.errors for report in reports),
        first_error=next((report.first_error for report in reports if report.first_error), None),
        client_cpu_seconds=sum(report.cpu_seconds for report in reports),
        latencies=latencies,
    )
