"""What the API would answer one subject now, storing nothing: the staff console's "try a subject"
and the subject lookup.

A preview reads what the hot path reads (the experiments' state with their active holdouts',
the subject's stored assignments and holdout memberships and, for experiments that follow
links, the links around the subject through the hot path's own statement) and decides with
the same pure functions (gates.decide, linking.linked_first, the formula of each holdout and
the slot draw of each layer), so it says what a request would get. A membership that is not
stored yet is judged by its holdout's formula, as a request would make it. A preview writes
nothing and counts in no metric: staff trying a subject leave no trace in the experiment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from assignments import gates
from assignments.configuration.export import experiment_population
from assignments.console.population_text import reason_text, slots_text
from assignments.hashing import Allocation
from assignments.linking import linked_first
from assignments.models import Assignment, Experiment, ExperimentHoldout, Layer, SubjectType
from assignments.selectors import ExperimentState, experiment_states_load
from assignments.slots import owns, ranges_from, slot
from assignments.storage import assignments_link_graph

EXPERIMENT_NOT_ACTIVE = "experiment_not_active"


@dataclass(frozen=True)
class Membership:
    """A subject's membership of a holdout: its stored row, else what the holdout's formula makes of it."""

    holdout_pk: int
    holdout: str
    status: str
    # held_out or general; None for a holdout that makes no members (a draft, or an ended one) and has none.
    variant: str | None
    held_out: bool
    stored: Assignment | None = None

    @property
    def text(self) -> str:
        return f"{self.holdout} ({self.variant})"


@dataclass(frozen=True)
class SlotDraw:
    """A subject's slot of a layer, and the active experiment of the layer that owns it now (None: free)."""

    layer_pk: int
    layer: str
    slot: int
    owner_pk: int | None
    owner: str | None


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
    # Its memberships of the active holdouts covering the experiment, when they decide (gate 2, or a winner).
    memberships: tuple[Membership, ...] = ()
    # Its slot of the experiment's layer, if the experiment is in one.
    slot: SlotDraw | None = None


def _memberships(state: ExperimentState, subject_id: str, stored: Mapping[int, Assignment]) -> tuple[Membership, ...]:
    """Gate 2's memberships: for each active holdout covering the experiment, in order, the stored one or
    the formula's (as _Memberships in assigning.py makes them)."""
    memberships = []
    for holdout in state.holdouts:
        row = stored.get(holdout.pk)
        variant_pk = row.variant_id if row is not None else holdout.variant_pk_for(subject_id)
        memberships.append(
            Membership(
                holdout_pk=holdout.pk,
                holdout=holdout.key,
                status=holdout.status,
                variant=holdout.variant_keys[variant_pk],
                held_out=variant_pk == holdout.control_pk,
                stored=row,
            )
        )
    return tuple(memberships)


def _new_memberships(memberships: tuple[Membership, ...]) -> str:
    """The memberships a request would store, in words: "" when all are stored already."""
    new = [membership.text for membership in memberships if membership.stored is None]
    if not new:
        return ""
    return f"its membership{'s' if len(new) > 1 else ''} of {', '.join(new)}, drawn by the holdout's formula"


def _reason_words(reason: str, population: dict, memberships: tuple[Membership, ...], draw: SlotDraw | None) -> str:
    """Why the gate stopped the subject, naming the holdout, or the slot and who owns it."""
    if reason == gates.HELD_OUT:
        return f"it is a held_out member of {', '.join(m.holdout for m in memberships if m.held_out)}"
    if reason == gates.LAYER_EXCLUDED and draw is not None:
        owner = f"active experiment {draw.owner} owns it" if draw.owner else "no active experiment owns it"
        slots = slots_text(population["layer"]["slots"])
        return f"its slot {draw.slot} of layer {draw.layer} is not among the experiment's {slots}: {owner}"
    return reason_text(reason, population)


def _entering(
    state: ExperimentState,
    decision: gates.Decision[int],
    population: dict,
    memberships: tuple[Membership, ...],
    draw: SlotDraw | None,
) -> tuple[str | None, str]:
    """The answer and its words for an active experiment's subject without a stored assignment."""
    control = state.variant_keys[state.control_pk]
    # Memberships are made only for subjects past the enrollment window (gate 1).
    windowed = decision.reason in (gates.ENROLLMENT_NOT_STARTED, gates.ENROLLMENT_CLOSED)
    new = "" if windowed else _new_memberships(memberships)
    if decision.reason is not None:
        words = _reason_words(decision.reason, population, memberships, draw)
        also = f" but {new}" if new else ""
        return (
            control,
            f"Excluded ({decision.reason}): {words}. The API answers the control, {control}; nothing is stored{also}.",
        )
    variant = state.variant_keys[decision.variant]
    also = f" Its first request also stores {new}." if new else ""
    if decision.linked:
        return variant, (
            f"Enters with {variant}, carried over from a linked identifier "
            f"(source linked, cohort {state.cohort}): following links skips the coverage gate.{also}"
        )
    return variant, f"Enters with {variant} (source hashed, cohort {state.cohort}), stored by its first request.{also}"


def _winner(
    state: ExperimentState,
    stored: Assignment | None,
    attributes: Mapping[str, object] | None,
    population: dict,
    memberships: tuple[Membership, ...],
) -> tuple[str | None, str | None, str, tuple[str, ...]]:
    """The answer, reason, words and attributes depended on, for a winner-declared experiment: the winner for
    everyone but held_out members of an active covering holdout and subjects the targeting stops."""
    winner = state.variant_keys[state.winning_variant_pk]
    control = state.variant_keys[state.control_pk]
    kept = "; its stored assignment is not answered while a winner is declared" if stored else ""
    new = _new_memberships(memberships)
    also = f" but {new}" if new else ""
    if any(membership.held_out for membership in memberships):
        words = _reason_words(gates.HELD_OUT, population, memberships, None)
        summary = (
            f"Excluded ({gates.HELD_OUT}): {words}. The API answers the control, {control}; "
            f"nothing is stored{also}{kept}."
        )
        return control, gates.HELD_OUT, summary, ()
    targeting = state.gates.targeting
    if targeting is not None and attributes is None:
        names = targeting.attribute_names()
        summary = (
            f"Depends on attributes: {', '.join(names)}. If the targeting lets it in, the winner {winner}; "
            f"else the control, {control}. Nothing is stored{also}{kept}."
        )
        return None, None, summary, names
    reason = state.gates.targeting_reason(attributes or {})
    if reason is not None:
        summary = (
            f"Excluded ({reason}): {reason_text(reason, population)}. The API answers the control, "
            f"{control}; nothing is stored{also}{kept}."
        )
        return control, reason, summary, ()
    summary = f"The winner {winner}, answered to every subject the targeting lets in; nothing is stored{also}{kept}."
    return winner, None, summary, ()


def _preview(
    experiment: Experiment,
    state: ExperimentState,
    subject_id: str,
    stored: Mapping[int, Assignment],
    attributes: Mapping[str, object] | None,
    linked: int | None,
    draw: SlotDraw | None,
    now: datetime,
) -> Preview:
    population = experiment_population(experiment)
    own = stored.get(experiment.pk)
    if state.status not in (Experiment.Status.ACTIVE, Experiment.Status.WINNER_DECLARED):
        summary = f"The experiment is {state.status}: the API answers 409 {EXPERIMENT_NOT_ACTIVE} and stores nothing."
        return Preview(experiment, own, None, EXPERIMENT_NOT_ACTIVE, summary, slot=draw)
    memberships = _memberships(state, subject_id, stored)
    if state.status == Experiment.Status.WINNER_DECLARED:
        answer, reason, summary, depends_on = _winner(state, own, attributes, population, memberships)
        return Preview(experiment, own, answer, reason, summary, depends_on, memberships, draw)
    if own is not None:
        summary = f"Its stored assignment, {own.variant.key}, is the answer: no gate changes it."
        return Preview(experiment, own, own.variant.key, None, summary, slot=draw)
    decision = gates.decide(
        state.gates,
        state.allocation,
        salt=state.salt,
        subject_id=subject_id,
        attributes=attributes,
        now=now,
        linked=linked,
        held_out=any(membership.held_out for membership in memberships),
    )
    answer, summary = _entering(state, decision, population, memberships, draw)
    if decision.depends_on:
        summary = f"Depends on attributes: {', '.join(decision.depends_on)}. If the targeting lets it in: {summary}"
        answer = None
    return Preview(experiment, None, answer, decision.reason, summary, decision.depends_on, memberships, draw)


def _slot_draws(layers: Sequence[Layer], subject_id: str) -> dict[int, SlotDraw]:
    """The subject's slot of each layer, with its active owner now, by layer primary key (one query)."""
    if not layers:
        return {}
    owners = Experiment.objects.filter(layer__in=layers, status=Experiment.Status.ACTIVE)
    by_layer: dict[int, list[tuple[int, str, list]]] = {}
    for layer_pk, pk, key, ranges in owners.order_by("key").values_list("layer", "pk", "key", "slots"):
        by_layer.setdefault(layer_pk, []).append((pk, key, ranges))
    draws = {}
    for layer in layers:
        number = slot(layer.salt, subject_id)
        owner = next(
            ((pk, key) for pk, key, ranges in by_layer.get(layer.pk, []) if owns(ranges_from(ranges), number)),
            (None, None),
        )
        draws[layer.pk] = SlotDraw(layer.pk, layer.key, number, *owner)
    return draws


def subject_previews(
    *,
    experiments: list[Experiment],
    subject_id: str,
    stored: list[Assignment],
    attributes: Mapping[str, object] | None,
    now: datetime | None = None,
) -> list[Preview]:
    """What the API would answer `subject_id` in each of these experiments (all of one subject type, their
    layers read with them) now, given its stored assignments and holdout memberships (`stored`, with their
    variants) and its attributes (None: unknown, so targeting stays undecided).

    Costs the states of the experiments and their holdouts (four queries), the active experiments of their
    layers (one, when any is in a layer) and, when an active one follows links and the subject has no
    assignment in it, the hot path's read of the links around the subject (one statement for all).
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
    layers = {experiment.layer_id: experiment.layer for experiment in experiments if experiment.layer_id is not None}
    draws = _slot_draws(list(layers.values()), subject_id)
    now = now or timezone.now()
    return [
        _preview(
            experiment,
            states[experiment.pk],
            subject_id,
            by_experiment,
            attributes,
            linked.get((experiment.pk, subject_id)),
            draws.get(experiment.layer_id),
            now,
        )
        for experiment in experiments
    ]


def subject_preview(
    *, experiment: Experiment, subject_id: str, attributes: Mapping[str, object] | None, now: datetime | None = None
) -> Preview:
    """What the API would answer `subject_id` in `experiment` now (subject_previews for one experiment, its
    layer read with it)."""
    holdout_pks = ExperimentHoldout.objects.filter(experiment=experiment).values_list("holdout", flat=True)
    stored = list(
        Assignment.objects.filter(experiment__in=[experiment.pk, *holdout_pks], subject_id=subject_id).select_related(
            "experiment", "variant"
        )
    )
    (preview,) = subject_previews(
        experiments=[experiment], subject_id=subject_id, stored=stored, attributes=attributes, now=now
    )
    return preview


def holdout_memberships(*, subject_type: SubjectType, subject_id: str, stored: list[Assignment]) -> list[Membership]:
    """The subject's membership of every holdout of its subject type, by ID: stored, else what the formula
    makes of it while the holdout is active (a request that reaches an experiment it covers stores that);
    a draft or ended holdout makes none. `stored` holds its memberships, with their variants."""
    by_holdout = {membership.experiment_id: membership for membership in stored}
    holdouts = Experiment.objects.filter(kind=Experiment.Kind.HOLDOUT, subject_type=subject_type)
    memberships = []
    for holdout in holdouts.prefetch_related("variants").order_by("key"):
        variants = list(holdout.variants.all())
        control = next(variant for variant in variants if variant.is_control)
        row = by_holdout.get(holdout.pk)
        if row is not None:
            variant = row.variant
        elif holdout.status == Experiment.Status.ACTIVE:
            variant = Allocation([(v, v.split) for v in variants]).variant_for(holdout.salt, subject_id)
        else:
            variant = None
        memberships.append(
            Membership(
                holdout_pk=holdout.pk,
                holdout=holdout.key,
                status=holdout.status,
                variant=None if variant is None else variant.key,
                held_out=variant is not None and variant.pk == control.pk,
                stored=row,
            )
        )
    return memberships


def layer_slots(*, subject_type: SubjectType, subject_id: str) -> list[SlotDraw]:
    """The subject's slot of every layer of its subject type, by layer ID, with who owns it now."""
    layers = list(Layer.objects.filter(subject_type=subject_type).order_by("key"))
    draws = _slot_draws(layers, subject_id)
    return [draws[layer.pk] for layer in layers]
