"""How many client connections each gunicorn worker holds, in memory the master shares with the workers it forks.

Every worker polls the one listening socket, and a new connection goes to
whichever worker's event loop accepts first, with every other one waiting. A
keep-alive connection (the proxy's upstream pool, a load generator's) then stays
with that worker for its life, so the race at connection time decides how the load is split for minutes:
16 connections over two workers were seen split 13/3, 14/2 and 16/0, a core
idle and the busy worker's answers twice as slow (bench/results/summary.md,
"Connections and workers"). With these counts a worker holding more than another
sends its clients to open new connections (deploy/workers.py).

A slot is claimed by a worker's process ID. A worker that dies without giving
its slot back (killed for a timeout) leaves a process ID no longer alive: its
count is ignored and its slot reused.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os


class ConnectionShares:
    def __init__(self, slots: int) -> None:
        self._pids = multiprocessing.RawArray(ctypes.c_long, slots)
        self._counts = multiprocessing.RawArray(ctypes.c_long, slots)
        # Slots ever claimed: the scans stop there, not at the end of the array.
        self._used = multiprocessing.RawValue(ctypes.c_int, 0)
        self._lock = multiprocessing.Lock()

    def claim(self, pid: int) -> int | None:
        """A slot for the worker `pid`, holding no connection yet; None if every slot is held by a live one."""
        with self._lock:
            for slot in range(len(self._pids)):
                holder = self._pids[slot]
                if holder == 0 or not _alive(holder):
                    self._pids[slot] = pid
                    self._counts[slot] = 0
                    self._used.value = max(self._used.value, slot + 1)
                    return slot
        return None

    def release(self, slot: int) -> None:
        with self._lock:
            self._pids[slot] = 0
            self._counts[slot] = 0

    def hold(self, slot: int, count: int) -> None:
        """The worker in `slot` holds `count` connections now."""
        self._counts[slot] = count

    def fewest_elsewhere(self, slot: int) -> int | None:
        """The fewest connections a live worker other than the one in `slot` holds; None if there is none."""
        fewest = None
        for other in range(self._used.value):
            pid = self._pids[other]
            if other == slot or pid == 0 or not _alive(pid):
                continue
            count = self._counts[other]
            if fewest is None or count < fewest:
                fewest = count
        return fewest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Another user's process reuses the number: not one of this server's workers.
        return False
    return True
