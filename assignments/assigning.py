"""The assignment hot path: decide, store and settle races, for both assignment endpoints.

`_settle` is the one place that does it: POST /experiment-assignments asks it for
many subjects of one experiment, POST /assignments for one subject in many
experiments, so both store and return the same assignment for the same experiment
and subject ID, whichever is called first and however many processes race.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from assignments import gates, metrics
from assignments.errors import ExperimentNotActive, ExperimentNotFound, InvalidAttributes
from assignments.linking import linked_first
from assignments.models import Assignment, Experiment, Variant
from assignments.selectors import (
    RUNNING_STATUSES,
    ExperimentCatalog,
    ExperimentState,
    experiment_catalog_cached,
    experiment_catalog_get,
    experiment_catalog_version,
    experiment_state_cached,
    experiment_state_get,
    holdouts_named,
    subject_type_cached,
    subject_type_get,
    subject_types_active_steps,
)
from assignments.storage import (
    Provenance,
    Stored,
    assignments_fetch_steps,
    assignments_insert_steps,
    assignments_link_graph_steps,
    storage_vendor,
)
from core.steps import Steps, steps_run

# (experiment pk, subject ID) -> the reason a gate stopped the subject (gates.py).
Excluded = dict[tuple[int, str], str]
# Subject ID -> the attributes sent for it.
Attributes = Mapping[str, Mapping[str, object]]
NO_ATTRIBUTES: Mapping[str, object] = {}


@dataclass(frozen=True)
class Settled:
    stored: Stored
    # The (experiment pk, subject ID) pairs this request stored, holdout memberships included.
    created: frozenset[tuple[int, str]]
    # The pairs without a stored assignment that a gate kept out: nothing was stored for them.
    excluded: Excluded = field(default_factory=dict)
    # The pairs of winner-declared experiments whose subject is a held_out member of an active covering holdout.
    held_out: frozenset[tuple[int, str]] = frozenset()
    # With `provenance` asked for, the cohort and source of each pair in `stored`; else None.
    provenance: Provenance | None = None


_HASHED = Assignment.Source.HASHED


class _Memberships:
    """Gate 2: the subjects' memberships of the active holdouts covering an experiment, read from the
    stored rows, else made by the holdout's formula and kept as rows to store.

    A made membership is what any other process would make and store too: a
    holdout's share and salt are fixed once it is active, it is randomised only
    (never forced or imported), and its rows are made only while it is active. So a
    request may act on its own before the insert settles a race, which costs no
    statement: the rows go into the insert of the request's assignments.
    """

    def __init__(self, stored: Stored) -> None:
        self.stored = stored
        self.new: dict[tuple[int, str], tuple] = {}

    def held_out(self, state: ExperimentState, subject_id: str) -> bool:
        held_out = False
        # Every covering holdout's membership is made, also after one holds the subject out.
        for holdout in state.holdouts:
            pair = (holdout.pk, subject_id)
            variant_pk = self.stored.get(pair)
            if variant_pk is None:
                row = self.new.get(pair)
                if row is None:
                    row = (holdout.pk, subject_id, holdout.variant_pk_for(subject_id), holdout.cohort, _HASHED)
                    self.new[pair] = row
                variant_pk = row[2]
            held_out = held_out or variant_pk == holdout.control_pk
        return held_out


def _screened(
    states: dict[int, ExperimentState],
    missing: list[tuple[int, str]],
    attributes: Attributes,
    now: datetime,
    memberships: _Memberships,
) -> tuple[list[tuple[int, str]], Excluded]:
    """The missing pairs that gates 1 to 4 let through, in their order, and the ones they stop.
    Memberships are made only for subjects that the enrollment window lets through."""
    entering = []
    excluded: Excluded = {}
    windows = {pk: states[pk].gates.window_reason(now) for pk in {pk for pk, _ in missing}}
    for pk, subject_id in missing:
        state = states[pk]
        reason = windows[pk]
        if reason is None:
            held_out = bool(state.holdouts) and memberships.held_out(state, subject_id)
            reason = state.gates.screen_open(subject_id, attributes.get(subject_id, NO_ATTRIBUTES), held_out=held_out)
        if reason is None:
            entering.append((pk, subject_id))
        else:
            excluded[(pk, subject_id)] = reason
    return entering, excluded


def _new_rows(
    states: dict[int, ExperimentState], entering: list[tuple[int, str]], *, vendor: str
) -> Steps[tuple[list[tuple], Excluded]]:
    """The rows to store for the pairs that passed gates 1 to 4, sorted: carried over from a linked
    identifier where the experiment follows links and one is assigned (assignments/linking.py), else,
    if the coverage gate lets the subject in, hashed; and the pairs that coverage left out."""
    following = [(pk, states[pk].subject_type_pk, subject_id) for pk, subject_id in entering if states[pk].follow_links]
    linked: dict[tuple[int, str], int] = {}
    if following:
        carried = linked_first(following, (yield from assignments_link_graph_steps(vendor=vendor, asked=following)))
        linked = carried.variants
        for pk, count in Counter(pk for pk, _ in carried.bounded).items():
            metrics.link_walks_bounded(experiment=states[pk].key, count=count)
    rows = []
    outside: Excluded = {}
    for pk, subject_id in entering:
        state = states[pk]
        variant_pk = linked.get((pk, subject_id))
        if variant_pk is not None:
            rows.append((pk, subject_id, variant_pk, state.cohort, Assignment.Source.LINKED))
            continue
        variant_pk = gates.covered_variant(state.gates, state.allocation, salt=state.salt, subject_id=subject_id)
        if variant_pk is None:
            outside[(pk, subject_id)] = gates.OUTSIDE_COVERAGE
        else:
            rows.append((pk, subject_id, variant_pk, state.cohort, _HASHED))
    return rows, outside


def _count_excluded(states: dict[int, ExperimentState], excluded: Excluded) -> None:
    if settings.METRICS_ENABLED:
        for (pk, reason), count in Counter((pk, reason) for (pk, _), reason in excluded.items()).items():
            metrics.subjects_excluded(experiment=states[pk].key, reason=reason, count=count)


def _count(states: dict[int, ExperimentState], rows: list[tuple], inserted: Stored, lost: dict[int, list[str]]) -> None:
    """The metrics of one settling (assignments/metrics.py): the assignments stored, by experiment and source,
    and those a concurrent request stored first, by experiment; labelled by the experiment's configured ID.

    Without a walk over a batch's rows where it can: only an experiment that follows links stores
    anything but hashed rows, so the others' counts are the number of pairs inserted.
    `states` holds the holdouts' states too: their memberships count under the holdout's ID.
    """
    if not settings.METRICS_ENABLED:
        return
    per_experiment = Counter(pk for pk, _ in inserted) if len(states) > 1 else {pk: len(inserted) for pk in states}
    for pk, count in per_experiment.items():
        linked = 0
        if states[pk].follow_links:
            linked = sum(
                1
                for row_pk, subject_id, _, _, source in rows
                if row_pk == pk and source == Assignment.Source.LINKED and (pk, subject_id) in inserted
            )
        for source, stored in ((Assignment.Source.HASHED, count - linked), (Assignment.Source.LINKED, linked)):
            if stored:
                metrics.assignments_created(experiment=states[pk].key, source=source.value, count=stored)
    for pk, subject_ids in lost.items():
        metrics.assignment_conflicts_lost(experiment=states[pk].key, count=len(subject_ids))


def _memberships_asked(states: dict[int, ExperimentState], subjects: dict[int, list[str]]) -> dict[int, list[str]]:
    """The subjects asked, under each active holdout covering their running experiment: gate 2 and the
    winners read their memberships."""
    asked: dict[int, dict[str, None]] = defaultdict(dict)
    for pk, subject_ids in subjects.items():
        for holdout in states[pk].holdouts:
            asked[holdout.pk].update(dict.fromkeys(subject_ids))
    return {pk: list(subject_ids) for pk, subject_ids in asked.items()}


def _settle(
    states: Sequence[ExperimentState],
    subjects: dict[int, list[str]],
    *,
    vendor: str,
    assign: bool,
    expected_version: int | None,
    attributes: Attributes,
    experiment_pk: int | None = None,
    provenance: bool = False,
) -> Steps[Settled | None]:
    """The stored variant of each (experiment, subject) pair asked, storing the missing ones of
    active experiments that the gates let in when `assign`; None if the cached states were stale
    (nothing was written then).

    `subjects` maps the pk of each running experiment asked to the subject IDs to answer.
    The version checked is `experiment_pk`'s resource_version or, without it,
    experiment_catalog_version; states loaded by this request (`expected_version` None)
    are current and not checked. At most four statements, with or without holdouts:
    read the stored pairs and holdout memberships (with the version), find linked
    identifiers' assignments (only for experiments that follow links), insert the missing
    assignments and memberships (ignoring conflicts on assignment_experiment_subject_unique)
    and, only if a concurrent request won some of those conflicts, read the rows it stored.
    With `provenance`, the answer also holds each stored pair's cohort and source, read by the same
    statements.
    """
    by_pk = {state.pk: state for state in states}
    active = {pk: ids for pk, ids in subjects.items() if by_pk[pk].status == Experiment.Status.ACTIVE}
    asked = active
    members_asked = _memberships_asked(by_pk, subjects)
    if members_asked:
        asked = {**active, **members_asked}
        by_pk.update((holdout.pk, holdout) for state in states for holdout in state.holdouts)
    fetched = yield from assignments_fetch_steps(
        vendor=vendor, subjects=asked, experiment_pk=experiment_pk, provenance=provenance
    )
    stored = fetched.stored
    kept = fetched.provenance
    if expected_version is not None and fetched.version != expected_version:
        return None
    missing = sorted(
        (pk, subject_id)
        for pk, subject_ids in active.items()
        for subject_id in subject_ids
        if (pk, subject_id) not in stored
    )
    now = timezone.now()
    memberships = _Memberships(stored)
    held_out = frozenset(
        (pk, subject_id)
        for pk, subject_ids in subjects.items()
        if by_pk[pk].status == Experiment.Status.WINNER_DECLARED and by_pk[pk].holdouts
        for subject_id in subject_ids
        if memberships.held_out(by_pk[pk], subject_id)
    )
    rows: list[tuple] = []
    excluded: Excluded = {}
    if assign and missing:
        if any(by_pk[pk].screened for pk in active):
            entering, excluded = _screened(by_pk, missing, attributes, now, memberships)
        else:
            entering = missing
        rows, outside = yield from _new_rows(by_pk, entering, vendor=vendor)
        excluded.update(outside)
        _count_excluded(by_pk, excluded)
    if assign and memberships.new:
        # Sorted as one batch, so that two requests take their index locks in one order.
        rows = sorted([*rows, *memberships.new.values()], key=lambda row: (row[0], row[1]))
    if not rows:
        return Settled(stored=stored, created=frozenset(), excluded=excluded, held_out=held_out, provenance=kept)
    inserted = yield from assignments_insert_steps(vendor=vendor, rows=rows, created_at=now, shards=fetched.shards)
    stored.update(inserted)
    lost: dict[int, list[str]] = defaultdict(list)
    for pk, subject_id, _, cohort, source in rows:
        if (pk, subject_id) not in inserted:
            lost[pk].append(subject_id)
        elif kept is not None:
            kept[(pk, subject_id)] = (cohort, source)
    _count(by_pk, rows, inserted, lost)
    if lost:
        won = yield from assignments_fetch_steps(
            vendor=vendor, subjects=lost, experiment_pk=experiment_pk, provenance=provenance
        )
        stored.update(won.stored)
        if kept is not None:
            kept.update(won.provenance)
    return Settled(stored=stored, created=frozenset(inserted), excluded=excluded, held_out=held_out, provenance=kept)


def _variant_keys(states: Sequence[ExperimentState], stored: Stored) -> Steps[dict[int, str]]:
    """The ID of every variant the states name or `stored` holds for them (holdout memberships aside).

    A stored variant can be newer than the state: an apply committed after the read
    that checked the state added a variant, and another process assigned it since.
    Its ID is then read; this request's answer is the stored row all the same.
    """
    keys = {pk: key for state in states for pk, key in state.variant_keys.items()}
    answered = {state.pk for state in states}
    unknown = {variant_pk for (pk, _), variant_pk in stored.items() if pk in answered and variant_pk not in keys}
    if unknown:
        keys.update((yield partial(_variant_keys_read, unknown)))
    return keys


def _variant_keys_read(variant_pks: set[int]) -> list[tuple[int, str]]:
    return list(Variant.objects.filter(pk__in=variant_pks).values_list("pk", "key"))


R = TypeVar("R")


def _with_fresh_state(answer: Callable[[bool], Steps[R | None]]) -> Steps[R]:
    """The steps of `answer(bypass_cache=False)`, or of `answer(bypass_cache=True)` when those found their
    cached state stale (nothing was written then).

    A state loaded now is current: an apply committing from here on is ordered
    after this request, so it is not checked again.
    """
    try:
        result = yield from answer(False)
    except IntegrityError:
        # The cached state named a variant that a concurrent apply has since
        # removed, and the foreign key refused it: nothing was stored.
        result = None
    if result is None:
        result = yield from answer(True)
    return result


def _attributes_checked(attributes: Mapping[str, object], declared: Mapping[str, str], path: str) -> list[dict]:
    """Field errors for the attribute values that do not have the type the subject type declares."""
    return [
        {"field": f"{path}.{name}", "message": message}
        for name, message in gates.attribute_problems(attributes, declared).items()
    ]


def _invalid_attributes(errors: list[dict]) -> InvalidAttributes:
    return InvalidAttributes("; ".join(f"{e['field']}: {e['message']}" for e in errors), errors=errors)


@dataclass(frozen=True)
class ExperimentAssignments:
    """The answer of POST /experiment-assignments."""

    # Subject ID -> variant ID, for every distinct subject in the order first sent.
    assignments: dict[str, str]
    # Subject ID -> the reason a gate kept it out (it got the control); empty when nobody was.
    excluded: dict[str, str]
    # Variant ID -> its value, for each variant in `assignments`; None unless asked for.
    values: dict[str, Any] | None = None


def _winner_reason(
    state: ExperimentState, settled: Settled, subject_id: str, attributes: Mapping[str, object]
) -> str | None:
    """Why a subject does not get a declared winner: held out by a covering holdout, or left out by the targeting."""
    if (state.pk, subject_id) in settled.held_out:
        return gates.HELD_OUT
    return state.gates.targeting_reason(attributes)


def _not_found(unknown: list[str]) -> ExperimentNotFound:
    """The 404 for IDs that name no experiment, saying of each that names a holdout that it is one."""
    names = ", ".join(map(repr, unknown))
    detail = f"No experiment has the ID {names}." if len(unknown) == 1 else f"No experiments have the IDs {names}."
    holdouts = holdouts_named(unknown)
    if holdouts:
        one = len(holdouts) == 1
        detail += (
            f" {', '.join(map(repr, holdouts))} {'is a holdout' if one else 'are holdouts'}: ask for the experiments "
            f"{'it covers, which it holds' if one else 'they cover, which they hold'} subjects out of."
        )
    return ExperimentNotFound(detail)


def _experiment_answer(
    experiment_id: str,
    subject_ids: list[str],
    attributes: Attributes,
    *,
    vendor: str,
    include_values: bool,
    bypass_cache: bool,
) -> Steps[ExperimentAssignments | None]:
    state = None if bypass_cache else experiment_state_cached(experiment_id=experiment_id)
    if state is None:
        state = yield partial(experiment_state_get, experiment_id=experiment_id, bypass_cache=bypass_cache)
    if state is None:
        raise (yield partial(_not_found, [experiment_id]))
    answer = yield from _experiment_variants(state, subject_ids, attributes, vendor=vendor, bypass_cache=bypass_cache)
    if answer is None or not include_values:
        return answer
    return replace(answer, values={key: state.value_of(key) for key in dict.fromkeys(answer.assignments.values())})


def _experiment_variants(
    state: ExperimentState, subject_ids: list[str], attributes: Attributes, *, vendor: str, bypass_cache: bool
) -> Steps[ExperimentAssignments | None]:
    if attributes:
        subject_type = subject_type_cached(subject_type_id=state.subject_type_key)
        if subject_type is None:
            subject_type = yield partial(subject_type_get, subject_type_id=state.subject_type_key)
        declared = subject_type.attribute_types() if subject_type is not None else {}
        # Field paths are built only for the subjects whose attributes have a problem: most have none.
        errors = [
            error
            for subject_id, sent in attributes.items()
            if gates.attribute_problems(sent, declared)
            for error in _attributes_checked(sent, declared, f"attributes.{subject_id}")
        ]
        if errors:
            raise _invalid_attributes(errors)
    # Only a running experiment's subjects are looked up; for the others the read checks
    # the cached status before it is answered.
    subjects = {state.pk: subject_ids} if state.status in RUNNING_STATUSES else {}
    if state.checked_by_catalog:
        expected_version = None if bypass_cache else state.catalog_version
        experiment_pk = None
    else:
        expected_version = None if bypass_cache else state.version
        experiment_pk = state.pk
    settled = yield from _settle(
        [state],
        subjects,
        vendor=vendor,
        assign=True,
        expected_version=expected_version,
        attributes=attributes,
        experiment_pk=experiment_pk,
    )
    if settled is None:
        return None
    control = state.variant_keys[state.control_pk]
    if state.status == Experiment.Status.WINNER_DECLARED:
        # A winner is rolled out to everyone but holdouts' held_out members and those the targeting
        # leaves out; nothing is stored for the experiment.
        winner = state.variant_keys[state.winning_variant_pk]
        answer = ExperimentAssignments(assignments=dict.fromkeys(subject_ids, winner), excluded={})
        if state.gates.targeting is not None or settled.held_out:
            for subject_id in subject_ids:
                reason = _winner_reason(state, settled, subject_id, attributes.get(subject_id, NO_ATTRIBUTES))
                if reason is not None:
                    answer.assignments[subject_id] = control
                    answer.excluded[subject_id] = reason
            _count_excluded({state.pk: state}, {(state.pk, subject_id): r for subject_id, r in answer.excluded.items()})
        return answer
    if state.status != Experiment.Status.ACTIVE:
        raise ExperimentNotActive(
            f"Experiment {state.key!r} is {state.status}: subjects are assigned while it is active, and given its "
            "winning variant once a winner is declared.",
            experiment_status=state.status,
        )
    keys = yield from _variant_keys([state], settled.stored)
    if not settled.excluded:
        return ExperimentAssignments(
            assignments={subject_id: keys[settled.stored[(state.pk, subject_id)]] for subject_id in subject_ids},
            excluded={},
        )
    answer = ExperimentAssignments(assignments={}, excluded={})
    for subject_id in subject_ids:
        reason = settled.excluded.get((state.pk, subject_id))
        if reason is None:
            answer.assignments[subject_id] = keys[settled.stored[(state.pk, subject_id)]]
        else:
            answer.assignments[subject_id] = control
            answer.excluded[subject_id] = reason
    return answer


def assign_subjects(**arguments: Any) -> ExperimentAssignments:
    """assign_subjects_steps, its `vendor` this connection's, sent on Django's connection."""
    return steps_run(assign_subjects_steps(vendor=storage_vendor(), **arguments))


def assign_subjects_steps(
    *,
    vendor: str,
    experiment_id: str,
    subject_ids: Sequence[str],
    attributes: Attributes | None = None,
    include_values: bool = False,
) -> Steps[ExperimentAssignments]:
    """Each distinct subject's variant ID, in the order first sent (POST /experiment-assignments).

    Active: stored assignments win; for a missing one the gates decide (gates.py,
    from `attributes`: subject ID -> its attributes, checked against the types the
    subject type declares), then it is carried over from a linked identifier (when
    the experiment follows links) or computed (hashing.py), and stored; a subject a
    gate keeps out gets the control, is listed in `excluded` and nothing is stored.
    Winner declared: the winner for everyone the targeting lets in, the control for
    the others, nothing stored.
    The experiment's state comes from a per-process cache that is checked against
    the stored resource_version on every request, so an apply by any process is
    seen by the next request. `include_values` adds each variant's value (ExperimentState.value_of).

    As steps (core/steps.py), for a driver on a connection that takes `vendor`'s statements (storage_vendor):
    what the caches hold is read at once, what they lack is a step of the sync connection.
    """
    distinct = list(dict.fromkeys(subject_ids))
    sent = attributes or {}
    return (
        yield from _with_fresh_state(
            lambda bypass_cache: _experiment_answer(
                experiment_id, distinct, sent, vendor=vendor, include_values=include_values, bypass_cache=bypass_cache
            )
        )
    )


@dataclass(frozen=True)
class SubjectAssignments:
    """The answer of POST /assignments."""

    assignments: dict[str, str]
    new_assignments: list[str]
    unassigned: dict[str, str]
    # Experiment ID -> the value of its variant in `assignments`; None unless asked for.
    values: dict[str, Any] | None = None
    # With `detailed`: the state of each experiment answered, in answer order, and experiment ID -> the cohort
    # and source of the stored assignment answered (active experiments only): what an OpenFeature evaluation
    # adds (assignments/ofrep.py).
    states: tuple[ExperimentState, ...] | None = None
    rows: dict[str, tuple[int, str]] | None = None


class Unassigned:
    """Why an experiment has no variant for the subject, in the order that decides when several apply."""

    EXPERIMENT_NOT_ACTIVE = "experiment_not_active"
    SUBJECT_TYPE_MISSING = "subject_type_missing"
    NOT_ASSIGNED = "not_assigned"
    # Then the gates' reasons, gates.REASONS.
    ALL = (EXPERIMENT_NOT_ACTIVE, SUBJECT_TYPE_MISSING, NOT_ASSIGNED, *gates.REASONS)


def _named_experiments(
    catalog: ExperimentCatalog, experiment_ids: list[str], *, bypass_cache: bool
) -> Steps[list[ExperimentState] | None]:
    """The experiments named, each once, in the order first named; None if a cached catalog
    turned out to be stale. Raises ExperimentNotFound naming every ID that names none."""
    states = [catalog.get(experiment_id) for experiment_id in experiment_ids]
    unknown = [experiment_id for experiment_id, state in zip(experiment_ids, states, strict=True) if state is None]
    if unknown:
        # One created since the catalog was cached is found by loading it again.
        if not bypass_cache and (yield experiment_catalog_version) != catalog.version:
            return None
        raise (yield partial(_not_found, unknown))
    return list({state.pk: state for state in states}.values())


def experiment_state_named_steps(*, experiment_id: str) -> Steps[ExperimentState]:
    """The state of the experiment with this ID (any case), from the catalog POST /assignments answers from;
    raises ExperimentNotFound, saying so of a holdout's ID."""
    catalog = experiment_catalog_cached() or (yield experiment_catalog_get)
    states = yield from _named_experiments(catalog, [experiment_id], bypass_cache=False)
    if states is None:
        catalog = yield partial(experiment_catalog_get, bypass_cache=True)
        states = yield from _named_experiments(catalog, [experiment_id], bypass_cache=True)
    return states[0]


def _subject_answer(
    identifiers: dict[int, str],
    experiment_ids: list[str] | None,
    attributes: Mapping[str, object],
    *,
    vendor: str,
    assign: bool,
    include_values: bool,
    bypass_cache: bool,
    bulk: bool,
    detailed: bool,
) -> Steps[SubjectAssignments | None]:
    catalog = None if bypass_cache else experiment_catalog_cached()
    if catalog is None:
        catalog = yield partial(experiment_catalog_get, bypass_cache=bypass_cache)
    if experiment_ids is None:
        states = catalog.running(set(identifiers))
        if bulk:
            states = [state for state in states if state.bulk_evaluation]
    else:
        states = yield from _named_experiments(catalog, experiment_ids, bypass_cache=bypass_cache)
        if states is None:
            return None
    subjects = {
        state.pk: [identifiers[state.subject_type_pk]]
        for state in states
        if state.status in RUNNING_STATUSES and state.subject_type_pk in identifiers
    }
    settled = yield from _settle(
        states,
        subjects,
        vendor=vendor,
        assign=assign,
        expected_version=None if bypass_cache else catalog.version,
        # One subject: each of its identifiers has the request's attributes.
        attributes=dict.fromkeys(identifiers.values(), attributes),
        provenance=detailed,
    )
    if settled is None:
        return None
    keys = yield from _variant_keys(states, settled.stored)
    answer = SubjectAssignments(assignments={}, new_assignments=[], unassigned={})
    winners_excluded: Excluded = {}
    for state in states:
        subject_id = identifiers.get(state.subject_type_pk)
        variant_pk = settled.stored.get((state.pk, subject_id))
        if state.status not in RUNNING_STATUSES:
            answer.unassigned[state.key] = Unassigned.EXPERIMENT_NOT_ACTIVE
        elif subject_id is None:
            answer.unassigned[state.key] = Unassigned.SUBJECT_TYPE_MISSING
        elif state.status == Experiment.Status.WINNER_DECLARED:
            # A winner is rolled out to everyone but holdouts' held_out members and those the
            # targeting leaves out, whatever `assign` says.
            reason = _winner_reason(state, settled, subject_id, attributes)
            if reason is None:
                answer.assignments[state.key] = state.variant_keys[state.winning_variant_pk]
            else:
                answer.unassigned[state.key] = winners_excluded[(state.pk, subject_id)] = reason
        elif variant_pk is None:
            answer.unassigned[state.key] = settled.excluded.get((state.pk, subject_id), Unassigned.NOT_ASSIGNED)
        else:
            answer.assignments[state.key] = keys[variant_pk]
            if (state.pk, subject_id) in settled.created:
                answer.new_assignments.append(state.key)
    if winners_excluded:
        _count_excluded({state.pk: state for state in states}, winners_excluded)
    if detailed:
        answer = replace(
            answer,
            states=tuple(states),
            rows={
                state.key: settled.provenance[(state.pk, identifiers[state.subject_type_pk])]
                for state in states
                if state.status == Experiment.Status.ACTIVE and state.key in answer.assignments
            },
        )
    if include_values:
        by_key = {state.key: state for state in states}
        return replace(
            answer, values={key: by_key[key].value_of(variant) for key, variant in answer.assignments.items()}
        )
    return answer


def assign_subject(**arguments: Any) -> SubjectAssignments:
    """assign_subject_steps, its `vendor` this connection's, sent on Django's connection."""
    return steps_run(assign_subject_steps(vendor=storage_vendor(), **arguments))


def assign_subject_steps(
    *,
    vendor: str,
    subject: dict[str, str],
    experiment_ids: Sequence[str] | None,
    assign: bool,
    attributes: Mapping[str, object] | None = None,
    include_values: bool = False,
    bulk: bool = False,
    detailed: bool = False,
    attributes_field: str = "attributes",
) -> Steps[SubjectAssignments]:
    """One subject, known by one identifier per subject type, in many experiments (POST /assignments), as steps.

    `subject` maps subject type IDs (any case; each must name an active type) to
    subject IDs. Without `experiment_ids`, every active or winner-declared experiment
    of those types, ordered by ID. Each experiment is answered by the rules of
    assign_subjects_steps for the identifier of its subject type; with `assign` false
    nothing is stored. The experiments come from a per-process catalog checked
    against experiment_catalog_version on every request, in the statement that reads
    the stored assignments, so the cost is the same for 1 experiment or 100.
    `attributes` are the subject's; a value must have the type that every subject type
    of `subject` declaring its name gives it (errors name it under `attributes_field`).
    `bulk` leaves out, of all running experiments, those with bulk_evaluation off (an
    OpenFeature bulk evaluation); `detailed` adds each experiment's state and stored
    row's cohort and source (SubjectAssignments.states and rows).
    """
    type_ids = {f"subject.{type_id}": type_id for type_id in subject}
    types = yield from subject_types_active_steps(type_ids)
    identifiers = {types[f"subject.{type_id}"].pk: subject_id for type_id, subject_id in subject.items()}
    sent = attributes or {}
    if sent:
        errors = {
            error["field"]: error
            for subject_type in types.values()
            for error in _attributes_checked(sent, subject_type.attribute_types(), attributes_field)
        }
        if errors:
            raise _invalid_attributes(list(errors.values()))
    named = None if experiment_ids is None else list(experiment_ids)
    return (
        yield from _with_fresh_state(
            lambda bypass_cache: _subject_answer(
                identifiers,
                named,
                sent,
                vendor=vendor,
                assign=assign,
                include_values=include_values,
                bypass_cache=bypass_cache,
                bulk=bulk,
                detailed=detailed,
            )
        )
    )
