"""Subject IDs prepared in the database ahead of a run and handed out once each: the base of the pools of
linked new cookies (bench/links.py) and of users who are holdout members already (bench/memberships.py).

A pool is made before the load workers fork: they share its counter (`_taken`)
and see what was stored up to their fork (`stored`). What a run may take is
stored by the bench process between runs (`top_up`), never while one is
measured, so storing it costs no target anything.
"""

from __future__ import annotations

import multiprocessing

import psycopg


class Pool:
    """Subclasses say what an ID is (`subject_id`) and store what the IDs numbered `start` to `end` need
    (`store`)."""

    # IDs stored ahead of a run: enough for this many a second of it, and twice the most a run took.
    per_second = 15_000
    name = "pool"

    def __init__(self, *, database_url: str, prefix: str) -> None:
        self.database_url = database_url
        self.prefix = prefix
        self._taken = multiprocessing.get_context("fork").Value("q", 0)
        self.stored = 0
        self._largest_run = 0
        self._run_start = 0

    def subject_id(self, number: int) -> str:
        raise NotImplementedError

    def store(self, connection: psycopg.Connection, start: int, end: int) -> None:
        raise NotImplementedError

    @property
    def taken(self) -> int:
        return self._taken.value

    def take(self, count: int) -> list[str]:
        """In a load worker: the next `count` IDs, never handed out before."""
        with self._taken.get_lock():
            start = self._taken.value
            self._taken.value = start + count
        if start + count > self.stored:
            raise RuntimeError(f"the {self.name} ran out ({self.stored:,} stored before this run)")
        return [self.subject_id(number) for number in range(start, start + count)]

    def top_up(self, *, seconds: float) -> None:
        """Before a run of `seconds` (warm-up included): store enough IDs for it."""
        self._run_start = self.taken
        wanted = self.taken + max(int(self.per_second * seconds), 2 * self._largest_run)
        if self.stored >= wanted:
            return
        with psycopg.connect(self.database_url, autocommit=True) as connection:
            self.store(connection, self.stored, wanted)
        self.stored = wanted

    def run_ended(self) -> None:
        self._largest_run = max(self._largest_run, self.taken - self._run_start)
