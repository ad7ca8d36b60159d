"""The assignment hot path: decide, store and settle races, for both assignment endpoints."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import IntegrityError
from django.utils import timezone

from assignments.errors import ExperimentNotActive, ExperimentNotFound
from assignments.models import Experiment
from assignments.selectors import ExperimentState, experiment_states, experiment_version_get
from assignments.storage import assignments_fetch, assignments_insert


def _current_state(experiment_id: str, *, bypass_cache: bool) -> ExperimentState:
    if bypass_cache:
        experiment_states.forget(experiment_id)
    state = experiment_states.get(experiment_id)
    if state is None:
        raise ExperimentNotFound(f"No experiment has the ID {experiment_id!r}.")
    return state


def _stored_variants(state: ExperimentState, subject_ids: list[str], *, bypass_cache: bool) -> dict[str, int] | None:
    """Every subject's stored variant pk, creating the missing assignments; None if
    a cached state turned out to be stale (nothing was written then).

    At most three statements: read the existing (with the experiment's version),
    insert the missing (ignoring conflicts on assignment_experiment_subject_unique),
    and, only if a concurrent request won some of those conflicts, read the rows it stored.
    """
    version, stored = assignments_fetch(experiment_pk=state.pk, subject_ids=subject_ids)
    if not bypass_cache and version != state.version:
        return None
    missing = sorted(subject_id for subject_id in subject_ids if subject_id not in stored)
    if not missing:
        return stored
    rows = [(subject_id, state.variant_pk_for(subject_id)) for subject_id in missing]
    inserted = assignments_insert(experiment_pk=state.pk, cohort=state.cohort, rows=rows, created_at=timezone.now())
    stored.update(inserted)
    lost = [subject_id for subject_id in missing if subject_id not in inserted]
    if lost:
        stored.update(assignments_fetch(experiment_pk=state.pk, subject_ids=lost)[1])
    return stored


def _assign(experiment_id: str, subject_ids: list[str], *, bypass_cache: bool) -> dict[str, str] | None:
    """The answer from the cached (or, bypassing the cache, a newly loaded) state; None if that state is stale."""
    state = _current_state(experiment_id, bypass_cache=bypass_cache)
    if state.status != Experiment.Status.ACTIVE:
        # Not a hot path for long: experiments leave these statuses rarely, so one
        # primary-key read to confirm the cached status is cheap insurance.
        if not bypass_cache and experiment_version_get(experiment_pk=state.pk) != state.version:
            return None
        if state.status != Experiment.Status.WINNER_DECLARED:
            raise ExperimentNotActive(
                f"Experiment {state.key!r} is {state.status}; only active experiments assign subjects.",
                experiment_status=state.status,
            )
        winner = state.variant_keys[state.winning_variant_pk]
        return {subject_id: winner for subject_id in subject_ids}
    stored = _stored_variants(state, subject_ids, bypass_cache=bypass_cache)
    if stored is None:
        return None
    if not all(variant_pk in state.variant_keys for variant_pk in stored.values()):
        # An apply committed since our fetch added a variant another process already assigned.
        state = _current_state(experiment_id, bypass_cache=True)
    return {subject_id: state.variant_keys[stored[subject_id]] for subject_id in subject_ids}


def assign_subjects(*, experiment_id: str, subject_ids: Sequence[str]) -> dict[str, str]:
    """Each distinct subject's variant ID, in the order first sent.

    Active: stored assignments win; missing ones are computed (hashing.py) and
    stored. Winner declared: the winner for everyone, nothing stored.
    The experiment's state comes from a per-process cache that is checked against
    the stored resource_version on every request, so an apply by any process is
    seen by the next request.
    """
    distinct = list(dict.fromkeys(subject_ids))
    try:
        answer = _assign(experiment_id, distinct, bypass_cache=False)
    except IntegrityError:
        # The cached state named a variant that a concurrent apply has since
        # removed, and the foreign key refused it: nothing was stored.
        answer = None
    if answer is None:
        # A state loaded now is current: an apply committing from here on is
        # ordered after this request, so it is not checked again.
        answer = _assign(experiment_id, distinct, bypass_cache=True)
    return answer
