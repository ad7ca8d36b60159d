"""What the API would answer one subject now, storing nothing: the staff console's "try a subject"
and the subject lookup.

A preview reads what the hot path reads (the experiments' state, the subject's stored
assignments and, for experiments that follow links, the links around the subject through
the hot path's own statement) and decides with the same pure functions (gates.decide,
linking.linked_first), so it says what a request would get. It writes nothing and counts
in no metric: staff trying a subject leave no trace in the experiment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from assignments import gates
from assignments.linking import linked_first
from assignments.models import Assignment, Experiment
from assignments.populations import reason_text
from assignments.resources import experiment_population
from assignments.selectors import ExperimentState, experiment_states_load
from assignments.storage import assignments_link_graph

EXPERIMENT_NOT_ACTIVE = "experiment_not_active"


@dataclass(frozen=True)
class Preview:
    experiment: Experiment
    # The subject's stored assignment in the experiment, if it has one.
    stored: Assignment | None
    # The variant ID the API would answer; None when it answers 409 experiment_not_active.
    answer: str | None
    # Why the subject gets no variant of its own: a gate's reason (gates.REASONS) or experiment_not_active.
    reason: str | None
    # What happens, in words.
    summary: str
    # The attributes the answer depends on, when they were not given and the experiment targets.
    depends_on: tuple[str, ...] = ()


def _entering(state: ExperimentState, decision: gates.Decision[int], population: dict) -> tuple[str | None, str]:
    """The answer and its words for an active experiment's subject without a stored assignment."""
    control = state.variant_keys[state.control_pk]
    if decision.reason is not None:
        words = reason_text(decision.reason, population)
        return (
            control,
            f"Excluded ({decision.reason}): {words}. The API answers the control, {control}; nothing is stored.",
        )
    variant = state.variant_keys[decision.variant]
    if decision.linked:
        return variant, (
            f"Enters with {variant}, carried over from a linked identifier "
            f"(source linked, cohort {state.cohort}): following links skips the coverage gate."
        )
    return variant, f"Enters with {variant} (source hashed, cohort {state.cohort}), stored by its first request."


def _preview(
    experiment: Experiment,
    state: ExperimentState,
    subject_id: str,
    stored: Assignment | None,
    attributes: Mapping[str, object] | None,
    linked: int | None,
    now: datetime,
) -> Preview:
    population = experiment_population(experiment)
    control = state.variant_keys[state.control_pk]
    if state.status == Experiment.Status.WINNER_DECLARED:
        winner = state.variant_keys[state.winning_variant_pk]
        targeting = state.gates.targeting
        kept = "; its stored assignment is not answered while a winner is declared" if stored else ""
        if targeting is not None and attributes is None:
            names = targeting.attribute_names()
            summary = (
                f"Depends on attributes: {', '.join(names)}. If the targeting lets it in, the winner {winner}; "
                f"else the control, {control}. Nothing is stored{kept}."
            )
            return Preview(experiment, stored, None, None, summary, depends_on=names)
        reason = state.gates.targeting_reason(attributes or {})
        if reason is not None:
            summary = (
                f"Excluded ({reason}): {reason_text(reason, population)}. The API answers the control, "
                f"{control}; nothing is stored{kept}."
            )
            return Preview(experiment, stored, control, reason, summary)
        summary = f"The winner {winner}, answered to every subject the targeting lets in; nothing is stored{kept}."
        return Preview(experiment, stored, winner, None, summary)
    if state.status != Experiment.Status.ACTIVE:
        summary = f"The experiment is {state.status}: the API answers 409 {EXPERIMENT_NOT_ACTIVE} and stores nothing."
        return Preview(experiment, stored, None, EXPERIMENT_NOT_ACTIVE, summary)
    if stored is not None:
        summary = f"Its stored assignment, {stored.variant.key}, is the answer: no gate changes it."
        return Preview(experiment, stored, stored.variant.key, None, summary)
    decision = gates.decide(
        state.gates,
        state.allocation,
        salt=state.salt,
        subject_id=subject_id,
        attributes=attributes,
        now=now,
        linked=linked,
    )
    answer, summary = _entering(state, decision, population)
    if decision.depends_on:
        summary = f"Depends on attributes: {', '.join(decision.depends_on)}. If the targeting lets it in: {summary}"
        answer = None
    return Preview(experiment, None, answer, decision.reason, summary, depends_on=decision.depends_on)


def subject_previews(
    *,
    experiments: list[Experiment],
    subject_id: str,
    stored: list[Assignment],
    attributes: Mapping[str, object] | None,
    now: datetime | None = None,
) -> list[Preview]:
    """What the API would answer `subject_id` in each of these experiments (all of one subject type) now,
    given its stored assignments in them and its attributes (None: unknown, so targeting stays undecided).

    Costs the experiments' state (two queries) and, when an active one follows links and the subject has
    no assignment in it, the hot path's read of the links around the subject (one statement for all).
    """
    if not experiments:
        return []
    loaded = experiment_states_load(Experiment.objects.filter(pk__in=[experiment.pk for experiment in experiments]))
    states = {state.pk: state for state in loaded}
    by_experiment = {assignment.experiment_id: assignment for assignment in stored}
    asked = [
        (experiment.pk, experiment.subject_type_id, subject_id)
        for experiment in experiments
        if states[experiment.pk].status == Experiment.Status.ACTIVE
        and states[experiment.pk].follow_links
        and experiment.pk not in by_experiment
    ]
    linked = linked_first(asked, assignments_link_graph(asked=asked)).variants if asked else {}
    now = now or timezone.now()
    return [
        _preview(
            experiment,
            states[experiment.pk],
            subject_id,
            by_experiment.get(experiment.pk),
            attributes,
            linked.get((experiment.pk, subject_id)),
            now,
        )
        for experiment in experiments
    ]


def subject_preview(
    *, experiment: Experiment, subject_id: str, attributes: Mapping[str, object] | None, now: datetime | None = None
) -> Preview:
    """What the API would answer `subject_id` in `experiment` now (subject_previews for one experiment)."""
    stored = list(
        Assignment.objects.filter(experiment=experiment, subject_id=subject_id).select_related("experiment", "variant")
    )
    (preview,) = subject_previews(
        experiments=[experiment], subject_id=subject_id, stored=stored, attributes=attributes, now=now
    )
    return preview
