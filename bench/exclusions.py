"""Which subjects of a gated scenario's request the gates should keep out, decided by the load worker.

Every subject the bench sends is new in the experiment, and the gated experiments follow no
links, so assignments/gates.py decides alone: the window, the holdouts (by their formula,
which made every stored membership the bench sends), the layer's slot, the targeting (gates
1 to 4), then the coverage draw (covered_variant). The load
workers check every answer against it after the request, untimed, but on the cores the
servers use, so the check is kept cheap: a scenario sends a few attribute objects over and
over (bench/scenarios.py), so the targeting judges each one the request uses once; the
coverage draw is computed only below coverage 1, which covers every draw; and in a batch,
the gates' decision is recomputed for its first CHECKED subjects (a draw per holdout and
the layer's slot each, which for all of a 1000-subject batch cost the client as much CPU
as a tenth of the request), while every other subject's answer need only name a reason
the gates have.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from assignments.gates import HELD_OUT, OUTSIDE_COVERAGE, REASONS, Gates, covered_variant
from assignments.hashing import SCALE, Allocation

CHECKED = 100


class Configured(Protocol):
    """An experiment as the bench reads it (bench/baseline.py's Experiment); a protocol so that this module,
    which baseline.py imports, imports nothing of baseline.py."""

    gates: Gates
    allocation: Allocation
    salt: str

    @property
    def screened(self) -> bool: ...

    def held_out(self, subject_id: str, stored: dict, new: dict) -> bool: ...


def excluded_expected(
    *, experiment: Configured, ids: list[str], profiles: tuple[dict[str, object], ...]
) -> dict[str, str]:
    """Subject ID -> the reason a gate keeps it out, for new subjects sent with profiles[n % len(profiles)]."""
    if not experiment.screened:
        return {}
    gates = experiment.gates
    window = gates.window_reason(datetime.now(UTC))
    targeted = [gates.targeting_reason(profile) for profile in (profiles or ({},))[: len(ids)]]
    excluded = {}
    for position, subject_id in enumerate(ids):
        reason = (
            window
            or (HELD_OUT if experiment.held_out(subject_id, {}, {}) else None)
            or gates.layer_reason(subject_id)
            or targeted[position % len(targeted)]
        )
        if reason is None and gates.coverage_threshold < SCALE:
            covered = covered_variant(gates, experiment.allocation, salt=experiment.salt, subject_id=subject_id)
            reason = None if covered is not None else OUTSIDE_COVERAGE
        if reason is not None:
            excluded[subject_id] = reason
    return excluded


def exclusions_problem(
    *, experiment: Configured, ids: list[str], profiles: tuple[dict[str, object], ...], excluded: dict[str, str]
) -> str | None:
    """What is wrong with the exclusions of an answer for new subjects `ids`, or None: those of the first
    CHECKED subjects must be the ones the gates decide, every other one must name a reason."""
    checked = ids[:CHECKED]
    expected = excluded_expected(experiment=experiment, ids=checked, profiles=profiles)
    answered = {subject_id: excluded[subject_id] for subject_id in checked if subject_id in excluded}
    if answered != expected:
        return f"{len(answered)} of the first {len(checked)} subjects excluded where the gates exclude {len(expected)}"
    unknown = {reason for reason in excluded.values() if reason not in REASONS}
    if unknown:
        return f"excluded for reasons the gates do not have: {sorted(unknown)}"
    return None
