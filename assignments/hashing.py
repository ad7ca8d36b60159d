"""The assignment function (docs/explanation/assignment.md), free of Django so anyone can reuse it.

    h = SHA-256(UTF-8(salt + ":" + subject_id))
    u = (first 8 bytes of h, big-endian unsigned) / 2**64
    variant = first variant whose cumulative split > u
              (the last variant with a non-zero split if rounding leaves none)

The comparison is done exactly, in integers: with n the 64-bit number and c a
cumulative split, c > n / 2**64  <=>  n < ceil(c * 2**64). Cumulative splits are
exact sums of the configured (binary floating-point) splits, so no float
rounding decides a subject's variant.

Coverage (docs/explanation/population.md) draws from the same digest, bytes 8 to 15:
the subject is in when n_c < ceil(coverage * 2**64), so it is independent of the
variant and raising coverage only adds subjects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction
from math import ceil
from typing import Generic, TypeVar

V = TypeVar("V")

SCALE = 2**64


def _digest(salt: str, subject_id: str) -> bytes:
    return hashlib.sha256(f"{salt}:{subject_id}".encode()).digest()


def draws(salt: str, subject_id: str) -> tuple[int, int]:
    """The variant draw n_v (bytes 0 to 7 of SHA-256(salt:subject_id)) and the coverage draw n_c
    (bytes 8 to 15), each a big-endian unsigned integer in [0, 2**64)."""
    digest = _digest(salt, subject_id)
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:16], "big")


def bucket_number(salt: str, subject_id: str) -> int:
    """The first 8 bytes of SHA-256(salt:subject_id) as an unsigned integer in [0, 2**64)."""
    return int.from_bytes(_digest(salt, subject_id)[:8], "big")


def threshold(share: float) -> int:
    """ceil(share * 2**64), exactly, for the share as read (a binary double): a draw n is in when n < it."""
    return ceil(Fraction(share) * SCALE)


def bucket(salt: str, subject_id: str) -> Fraction:
    """u of the formula above, exactly."""
    return Fraction(bucket_number(salt, subject_id), SCALE)


class Allocation(Generic[V]):
    """Variants with their splits, in configuration order, ready to place many subjects."""

    def __init__(self, variants: Sequence[tuple[V, float]]) -> None:
        if not variants:
            raise ValueError("an allocation needs at least one variant")
        if any(split < 0 for _, split in variants):
            raise ValueError("splits must not be negative")
        nonzero = [variant for variant, split in variants if split > 0]
        if not nonzero:
            raise ValueError("at least one split must be above zero")
        cumulative = Fraction(0)
        self._thresholds: list[tuple[int, V]] = []
        for variant, split in variants:
            cumulative += Fraction(split)
            self._thresholds.append((ceil(cumulative * SCALE), variant))
        self._fallback = nonzero[-1]

    def choose(self, number: int) -> V:
        for threshold, variant in self._thresholds:
            if number < threshold:
                return variant
        return self._fallback

    def variant_for(self, salt: str, subject_id: str) -> V:
        return self.choose(bucket_number(salt, subject_id))


def assign_variant(salt: str, subject_id: str, variants: Sequence[tuple[V, float]]) -> V:
    """One subject's variant; for many subjects build an Allocation once."""
    return Allocation(variants).variant_for(salt, subject_id)
