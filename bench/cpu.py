"""CPU time from /proc: per process (gunicorn workers, PostgreSQL backends) and for the machine."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
CPUS = len(Path("/proc/stat").read_text().split("\ncpu")) - 1


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name in parentheses may hold spaces; the fields after it do not.
    return text[text.rindex(")") + 2 :].split()


def process_cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User plus system CPU seconds of each live process among pids."""
    seconds = {}
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            # utime and stime: fields 14 and 15 of proc(5), 12 and 13 after the name.
            seconds[pid] = (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND
    return seconds


def reaped_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of the children that process pid has waited for, since it started."""
    fields = _stat_fields(pid)
    # cutime and cstime: fields 16 and 17 of proc(5).
    return None if fields is None else (int(fields[13]) + int(fields[14])) / TICKS_PER_SECOND


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[1])


def children_of(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                children.append(int(entry.name))
    return children


@dataclass(frozen=True)
class MachineCpu:
    busy: float
    total: float

    @classmethod
    def read(cls) -> MachineCpu:
        values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = values[3] + values[4]  # idle and iowait
        # guest time is already inside user time.
        total = sum(values[:8])
        return cls(busy=(total - idle) / TICKS_PER_SECOND, total=total / TICKS_PER_SECOND)


class CpuWindow:
    """CPU spent by a set of processes and by the whole machine between start() and end().

    A process there at the end and not at the start (a connection opened in
    between) counts from its birth. A process there at the start and gone at
    the end (a gunicorn worker replaced after max_requests, the backend of a
    connection closed) left its time in its parent when reaped: then, with
    `parent` (the gunicorn master, the postmaster), the time the parent reaped
    in between is added, less what its other children that ended had spent
    before the start. What those others (a connection to another database)
    spent within the window is counted too, as is any child that lived and
    ended within it: nothing tells them apart, so the parent's time is used
    only when one of the set ended. Without a parent, a process gone at the end
    makes the total unknown: None rather than a guess. A process of the set
    that lived and ended within the window, with none gone at the end, is missed.
    """

    def __init__(self, pids_now, *, parent: int | None = None) -> None:
        self.pids_now = pids_now
        self.parent = parent
        self.start_seconds: dict[int, float] = {}
        self.start_reaped: float | None = None
        self.start_others: dict[int, float] = {}
        self.start_machine: MachineCpu | None = None
        self.processes: float | None = None
        self.machine_busy_cores: float | None = None

    def _reaped(self) -> float | None:
        return None if self.parent is None else reaped_cpu_seconds(self.parent)

    def _children(self) -> set[int]:
        return set() if self.parent is None else set(children_of(self.parent))

    def start(self) -> None:
        self.start_seconds = process_cpu_seconds(self.pids_now())
        self.start_reaped = self._reaped()
        self.start_others = process_cpu_seconds(self._children() - self.start_seconds.keys())
        self.start_machine = MachineCpu.read()

    def end(self) -> None:
        end_seconds = process_cpu_seconds(self.pids_now())
        end_reaped = self._reaped()
        others_ended = self.start_others.keys() - self._children()
        machine = MachineCpu.read()
        if self.start_machine is not None and machine.total > self.start_machine.total:
            # `total` adds up every CPU's time: over the CPU count it is the wall time.
            wall = (machine.total - self.start_machine.total) / CPUS
            self.machine_busy_cores = (machine.busy - self.start_machine.busy) / wall
        live = sum(end_seconds.values()) - sum(self.start_seconds.values())
        if self.start_seconds.keys() <= end_seconds.keys():
            self.processes = live
        elif self.start_reaped is not None and end_reaped is not None:
            before = sum(self.start_others[pid] for pid in others_ended)
            self.processes = live + end_reaped - self.start_reaped - before


class CpuWindows:
    """CpuWindows taken as one set: a database's backends on every node of a Citus cluster."""

    def __init__(self, windows: list[CpuWindow]) -> None:
        self.windows = windows

    def start(self) -> None:
        for window in self.windows:
            window.start()

    def end(self) -> None:
        for window in self.windows:
            window.end()

    @property
    def processes(self) -> float | None:
        seconds = [window.processes for window in self.windows]
        return None if None in seconds else sum(seconds)

    @property
    def machine_busy_cores(self) -> float | None:
        return self.windows[0].machine_busy_cores
