"""Which subjects of a gated scenario's request the gates should keep out, decided by the load worker.

Every subject the bench sends is new, and the gated experiments follow no links and are in
no layer or holdout, so assignments/gates.py decides alone: the window, then the targeting
(gates 1 and 4), then the coverage draw (covered_variant). The load
workers check every answer against it after the request, untimed, but on the cores the
servers use: a scenario sends a few attribute objects over and over (bench/scenarios.py),
so the targeting judges each one the request uses once, and the draw is computed only
below coverage 1, which covers every draw.
"""

from __future__ import annotations

from datetime import UTC, datetime

from assignments.gates import OUTSIDE_COVERAGE, Gates, covered_variant
from assignments.hashing import SCALE, Allocation


def excluded_expected(
    *, gates: Gates, allocation: Allocation, salt: str, ids: list[str], profiles: tuple[dict[str, object], ...]
) -> dict[str, str]:
    """Subject ID -> the reason a gate keeps it out, for new subjects sent with profiles[n % len(profiles)]."""
    if not gates.any:
        return {}
    window = gates.window_reason(datetime.now(UTC))
    targeted = [gates.targeting_reason(profile) for profile in (profiles or ({},))[: len(ids)]]
    excluded = {}
    for position, subject_id in enumerate(ids):
        reason = window or targeted[position % len(targeted)]
        if reason is None and gates.coverage_threshold < SCALE:
            covered = covered_variant(gates, allocation, salt=salt, subject_id=subject_id) is not None
            reason = None if covered else OUTSIDE_COVERAGE
        if reason is not None:
            excluded[subject_id] = reason
    return excluded
