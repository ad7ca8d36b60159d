"""The one policy for state a process keeps between requests (docs/how-to/operate.md, "Per-process caches").

Every cache is bounded, and its entries are either versioned or live for a time
to live:

- Versioned: an entry is kept until it is forgotten. Whoever reads one checks
  its version against the database in a statement it sends anyway, and loads it
  again (`bypass_cache`) when it is stale, so a change is seen by the next request.
- Time to live: an entry is trusted for a while, so a change made by another
  process is seen within that time; this process forgets its own changes at once.

`caches_clear()` empties every cache of the process: after an apply, and between tests.

gunicorn's gthread workers run requests on several threads of one process. A read
takes no lock: it is one dict lookup, atomic under the GIL. A write takes the
cache's lock, so that the bound's check and the insert, or a check-and-set
(`put_unless`), are one step.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_caches: weakref.WeakSet[ProcessCache] = weakref.WeakSet()


@dataclass(frozen=True)
class Versioned:
    """Entries live until forgotten; the reader checks each one's version."""

    def deadline(self) -> float:
        return math.inf


@dataclass(frozen=True)
class TimeToLive:
    """Entries live `seconds()` from when they are stored.

    A function rather than a number: it is read at each store, so a setting
    changed at run time (a test's override) applies to the next entry.
    """

    seconds: Callable[[], float]

    def deadline(self) -> float:
        return time.monotonic() + self.seconds()


class ProcessCache(Generic[K, V]):
    """A bounded per-process map under one policy; `None` is never a value, it means absent."""

    def __init__(self, *, max_entries: int, policy: Versioned | TimeToLive) -> None:
        self.max_entries = max_entries
        self.policy = policy
        self._entries: dict[K, tuple[float, V]] = {}
        self._lock = threading.Lock()
        _caches.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value stored under `key`, unless absent or past its time to live."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] > time.monotonic():
            return entry[1]
        return None

    def get_or_load(self, key: K, load: Callable[[], V | None], *, bypass_cache: bool = False) -> V | None:
        """The value stored under `key`, else `load()`'s, stored unless None.

        Nothing is stored for None, so what does not exist yet (an experiment that
        another process creates) is found by the next call. With `bypass_cache`
        the value is loaded again, and forgotten if it is gone.
        """
        if bypass_cache:
            self.forget(key)
        value = self.get(key)
        if value is None:
            value = load()
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._store(key, value)

    def put_unless(self, key: K, value: V, *, keep: Callable[[V], bool]) -> bool:
        """Store `value` unless a live entry satisfies `keep`; returns whether it was stored."""
        with self._lock:
            current = self.get(key)
            if current is not None and keep(current):
                return False
            self._store(key, value)
            return True

    def _store(self, key: K, value: V) -> None:
        # Emptied rather than evicted one at a time: real use stays far below the
        # bound, which only stops pathological growth, and an emptied cache costs
        # reloads, never a wrong answer.
        if key not in self._entries and len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = (self.policy.deadline(), value)

    def forget(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def caches_clear() -> None:
    """Empty every cache of this process."""
    for cache in list(_caches):
        cache.clear()
