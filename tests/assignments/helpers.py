"""Shared checks for the assignment tests: the assignment formula and the error shape, written independently."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

PROBLEM_CONTENT_TYPE = "application/problem+json"


def reference_variant(salt: str, subject_id: str, splits: Sequence[tuple[str, float]]) -> str:
    """The assignment formula (docs/reference/api.md) in plain integers, sharing no code with assignments/hashing.py.

    With u = n / 2**64 and each split an exact binary fraction p / q (q a power of
    two), "cumulative > u" is "cumulative_numerator * 2**64 > n * denominator".
    """
    n = int.from_bytes(hashlib.sha256((salt + ":" + subject_id).encode("utf-8")).digest()[:8], "big")
    ratios = [split.as_integer_ratio() for _, split in splits]
    denominator = max(q for _, q in ratios)
    cumulative = 0
    for (variant, _), (p, q) in zip(splits, ratios, strict=True):
        cumulative += p * (denominator // q)
        if cumulative * 2**64 > n * denominator:
            return variant
    return [variant for variant, split in splits if split > 0][-1]


def assert_problem(response, *, status: int, code: str) -> dict:
    """The response is RFC 9457 problem+json with our members; returns the body."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].split(";")[0] == PROBLEM_CONTENT_TYPE
    body = json.loads(response.content)
    assert body["type"] == "about:blank"
    assert body["status"] == status
    assert body["code"] == code
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def error_fields(body: dict) -> list[str]:
    return [error["field"] for error in body["errors"]]
