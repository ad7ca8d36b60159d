"""Which subjects of a gated scenario's request the gates should keep out, decided by the load worker.

Every subject the bench sends is new and the gated experiments follow no links, so
assignments/gates.py decides alone: the first of gates 1 to 4 that stops the subject
(Gates.screen), then the coverage draw (entered). The load workers check every answer
against it after the request, untimed, but on the cores the servers use: a scenario sends
a few attribute objects over and over (bench/scenarios.py), so each one the request uses is
screened once, and the draw is computed only below coverage 1, which covers every draw.
"""

from __future__ import annotations

from datetime import UTC, datetime

from assignments.gates import Gates, entered
from assignments.hashing import SCALE, Allocation


def excluded_expected(
    *, gates: Gates, allocation: Allocation, salt: str, ids: list[str], profiles: tuple[dict[str, object], ...]
) -> dict[str, str]:
    """Subject ID -> the reason a gate keeps it out, for new subjects sent with profiles[n % len(profiles)]."""
    if not gates.any:
        return {}
    now = datetime.now(UTC)
    screened = [gates.screen(profile, now) for profile in (profiles or ({},))[: len(ids)]]
    excluded = {}
    for position, subject_id in enumerate(ids):
        reason = screened[position % len(screened)]
        if reason is None and gates.coverage_threshold < SCALE:
            reason = entered(gates, allocation, salt=salt, subject_id=subject_id).reason
        if reason is not None:
            excluded[subject_id] = reason
    return excluded
