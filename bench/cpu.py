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

    Processes that are not there at both ends (a connection opened or closed in
    between) make the per-process total unknown: None rather than a guess.
    """

    def __init__(self, pids_now) -> None:
        self.pids_now = pids_now
        self.start_seconds: dict[int, float] = {}
        self.start_machine: MachineCpu | None = None
        self.processes: float | None = None
        self.machine_busy_cores: float | None = None

    def start(self) -> None:
        self.start_seconds = process_cpu_seconds(self.pids_now())
        self.start_machine = MachineCpu.read()

    def end(self) -> None:
        end_seconds = process_cpu_seconds(self.pids_now())
        machine = MachineCpu.read()
        if self.start_machine is not None and machine.total > self.start_machine.total:
            # `total` adds up every CPU's time: over the CPU count it is the wall time.
            wall = (machine.total - self.start_machine.total) / CPUS
            self.machine_busy_cores = (machine.busy - self.start_machine.busy) / wall
        if end_seconds and end_seconds.keys() == self.start_seconds.keys():
            self.processes = sum(end_seconds[pid] - self.start_seconds[pid] for pid in end_seconds)
