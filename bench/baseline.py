"""The raw-SQL floor: the same work as the service's hot path with nothing around it.

One plain psycopg 3 connection per worker (autocommit, psycopg's defaults, so
statements are prepared after a few runs), the assignment computed in Python by
assignments/hashing.py, experiments read once, and set-based statements: a fetch
of the stored pairs, an INSERT ... ON CONFLICT DO NOTHING RETURNING for the
missing ones, and a re-read of conflict losers only. No HTTP, no Django, and no
/healthz: there is no server to ask.

Two sets of statements. The original /experiment-assignments scenarios send the
array statements below (unnest(text[]) joined to the (experiment_id, subject_id)
unique index), as they were first measured. Scenarios with `service_sql`
(POST /assignments, followLinks) send assignments/storage.py's own statements
through `pairs_store`, which the minimal app also uses: the fetch with its head
row, the link walk (POSTGRES_LINK_GRAPH, then assignments/linking.py's in-memory
walk of each subject, as the service does) for experiments that follow links,
then the insert. An identifier link is the service's one INSERT ... ON CONFLICT
DO NOTHING, with the subject types read once.

For experiments with gates (the scenarios that send attributes, and those of the
experiment in a layer with holdouts) the floors do the gates' work as they do the
formula's, in Python with assignments/gates.py and the configuration read once: the new
subjects the gates keep out get the control, their reason and no row, so every target
inserts the same rows as the service. An active holdout covering an experiment is read
in the same fetch: its stored memberships, under the holdout's pk, for every subject
asked; a subject without one is made a member by the formula and its row goes into the
same insert, as the service stores them (assignments/assigning.py, gate 2).

On a Citus coordinator (assignments distributed, bench/run hot-path --citus-workers) every
assignment scenario sends storage.py's statements, with the fetch and the insert
in their Citus forms: Citus refuses the PostgreSQL fetch, and sends the array fetch to every
shard, which would make a floor of more work than the service does there. A batch's read
and insert go shard by shard, as the service's do. The followLinks scenarios are not for
a Citus run: Citus refuses POSTGRES_LINK_GRAPH.

The statements are written once, as steps (`Steps`): generators that yield each
statement and get its rows back, with no connection of their own. `steps_run`
sends them on a psycopg connection (the baseline, the WSGI minimal app) and
`steps_run_async` on an async one (the ASGI minimal app, bench/minimal_asgi.py),
so every floor sends the same statements with the same parameters. On Citus the
shard-by-shard reads and COPYs of assignments/storage_citus.py take callbacks: they
are steps of the sync connection only.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg

from assignments.gates import OUTSIDE_COVERAGE, Gates, covered_variant
from assignments.hashing import Allocation
from assignments.linking import link_graph, linked_first
from assignments.storage import (
    FETCH,
    POSTGRES_HEAD_CATALOG,
    POSTGRES_HEAD_EXPERIMENT,
    POSTGRES_INSERT,
    POSTGRES_LINK_GRAPH,
    link_graph_params,
)
from assignments.storage_citus import CITUS_COPY, Shards, citus_fetch_rows, citus_store
from bench.exclusions import excluded_expected, exclusions_problem
from bench.scenarios import ASSIGN, EXPERIMENT_ID, LINK, ONE_SUBJECT, Scenario, SubjectIds, attributes_sent
from core.citus import distributed_asked
from core.database import json_text
from core.steps import steps_driven, steps_driven_async
from idlinks.storage import INSERT as LINK_INSERT

FETCH_ARRAYS = """
SELECT a.subject_id, a.variant_id
FROM unnest(%s::text[]) AS s(subject_id)
JOIN assignments_assignment a ON a.experiment_id = %s AND a.subject_id = s.subject_id
"""

INSERT_ARRAYS = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT %s, s.subject_id, s.variant_id, %s, %s
FROM unnest(%s::text[], %s::bigint[]) WITH ORDINALITY AS s(subject_id, variant_id, ord)
ORDER BY s.ord
ON CONFLICT (experiment_id, subject_id) DO NOTHING
RETURNING subject_id, variant_id
"""

EXPERIMENTS = """
SELECT e.id, e.key, e.status, e.salt, e.subject_type_id, e.follow_links, coalesce(max(c.number), 1),
       e.enrollment_start_at, e.enrollment_stop_at, e.targeting, e.coverage, t.attributes, l.salt, e.slots,
       e.kind, e.bulk_evaluation
FROM assignments_experiment e
JOIN assignments_subjecttype t ON t.id = e.subject_type_id
LEFT JOIN assignments_layer l ON l.id = e.layer_id
LEFT JOIN assignments_cohort c ON c.experiment_id = e.id
GROUP BY e.id, t.id, l.id
"""

HOLDOUTS = "SELECT experiment_id, holdout_id FROM assignments_experimentholdout ORDER BY experiment_id, position"
VARIANTS = "SELECT experiment_id, id, key, split, is_control FROM assignments_variant ORDER BY experiment_id, position"
SUBJECT_TYPES = "SELECT lower(key), id FROM assignments_subjecttype WHERE status = 'active'"

# (experiment pk, subject ID) -> variant pk
Stored = dict[tuple[int, str], int]
# (experiment pk, subject ID) -> the reason a gate kept the subject out
Excluded = dict[tuple[int, str], str]
# (experiment pk, subject ID) -> the stored row's (cohort, source), which the fetch reads with its variant
Provenance = dict[tuple[int, str], tuple[int, str]]
# Subject ID -> the attributes sent for it
Attributes = Mapping[str, Mapping[str, object]]


@dataclass(frozen=True)
class Statement:
    """One statement for a driver to send, as `connection.execute(sql, params)` does: its rows come back."""

    sql: str
    params: Any = None


T = TypeVar("T")
# A step: a statement, or (Citus only) a function of the sync psycopg connection, whose value comes back.
Step = Statement | Callable[[psycopg.Connection], Any]
# Statements to send in turn, each one's rows (a list; empty for a statement that returns none) sent back into
# the generator and a statement's error thrown into it, as a direct call would raise it; returns the outcome.
Steps = Generator[Step, Any, T]


def steps_run(connection: psycopg.Connection, steps: Steps[T]) -> T:
    """The outcome of `steps`, their statements sent on a psycopg connection."""

    def perform(step: Step) -> Any:
        if not isinstance(step, Statement):
            return step(connection)
        cursor = connection.execute(step.sql, step.params)
        return cursor.fetchall() if cursor.description is not None else []

    return steps_driven(steps, perform)


async def steps_run_async(connection: psycopg.AsyncConnection, steps: Steps[T]) -> T:
    """steps_run on an async psycopg connection: the same statements, awaited. No Citus step runs here."""

    async def perform(step: Step) -> Any:
        if not isinstance(step, Statement):
            raise RuntimeError("a Citus step needs a sync connection (bench.baseline.steps_run)")
        cursor = await connection.execute(step.sql, step.params)
        return await cursor.fetchall() if cursor.description is not None else []

    return await steps_driven_async(steps, perform)


@dataclass(frozen=True)
class Experiment:
    pk: int
    key: str
    status: str
    salt: str
    cohort: int
    subject_type_pk: int
    follow_links: bool
    allocation: Allocation[int]
    variant_keys: dict[int, str]
    control_pk: int
    control_key: str
    gates: Gates
    # The active holdouts covering the experiment, in the order listed.
    holdouts: tuple[Experiment, ...] = ()
    # "experiment" or "holdout"; spec.bulkEvaluation: listed by an OpenFeature bulk evaluation.
    kind: str = "experiment"
    bulk_evaluation: bool = True

    @property
    def screened(self) -> bool:
        return self.gates.any or bool(self.holdouts)

    def held_out(self, subject_id: str, stored: Stored, new: dict[tuple[int, str], list]) -> bool:
        """Gate 2: whether a holdout holds the subject out, by its stored membership or, without one, by the
        formula, whose row goes into `new`; every covering holdout's membership is made."""
        held_out = False
        for holdout in self.holdouts:
            pair = (holdout.pk, subject_id)
            variant_pk = stored.get(pair)
            if variant_pk is None:
                row = new.get(pair)
                if row is None:
                    drawn = holdout.allocation.variant_for(holdout.salt, subject_id)
                    row = new[pair] = [holdout.pk, subject_id, drawn, holdout.cohort, "hashed"]
                variant_pk = row[2]
            held_out = held_out or variant_pk == holdout.control_pk
        return held_out


def experiments_read(connection: psycopg.Connection) -> dict[str, Experiment]:
    """Every experiment, by lower-cased ID: what the hot path needs, read once (the service caches the same)."""
    return steps_run(connection, experiments_steps())


def experiments_steps() -> Steps[dict[str, Experiment]]:
    """experiments_read's statements."""
    variants: dict[int, list[tuple[int, str, float]]] = {}
    controls: dict[int, tuple[int, str]] = {}
    for experiment_pk, pk, key, split, is_control in (yield Statement(VARIANTS)):
        variants.setdefault(experiment_pk, []).append((pk, key, split))
        if is_control:
            controls[experiment_pk] = (pk, key)
    experiments: dict[int, Experiment] = {}
    for (
        pk,
        key,
        status,
        salt,
        subject_type_pk,
        follow_links,
        cohort,
        start_at,
        stop_at,
        targeting,
        coverage,
        attributes,
        layer_salt,
        slots,
        kind,
        bulk_evaluation,
    ) in (yield Statement(EXPERIMENTS)):
        experiments[pk] = Experiment(
            pk=pk,
            key=key,
            status=status,
            salt=salt,
            cohort=cohort,
            subject_type_pk=subject_type_pk,
            follow_links=follow_links,
            allocation=Allocation([(variant_pk, split) for variant_pk, _, split in variants.get(pk, [])]),
            variant_keys={variant_pk: variant_key for variant_pk, variant_key, _ in variants.get(pk, [])},
            control_pk=controls[pk][0],
            control_key=controls[pk][1],
            gates=Gates.stored(
                start_at=start_at,
                stop_at=stop_at,
                layer_salt=layer_salt,
                slots=slots,
                targeting=targeting,
                attributes=attributes,
                coverage=coverage,
            ),
            kind=kind,
            bulk_evaluation=bulk_evaluation,
        )
    covering: dict[int, list[Experiment]] = {}
    for experiment_pk, holdout_pk in (yield Statement(HOLDOUTS)):
        if experiments[holdout_pk].status == "active":
            covering.setdefault(experiment_pk, []).append(experiments[holdout_pk])
    for experiment_pk, holdouts in covering.items():
        experiments[experiment_pk] = replace(experiments[experiment_pk], holdouts=tuple(holdouts))
    return {experiment.key.lower(): experiment for experiment in experiments.values()}


def experiment_read(connection: psycopg.Connection, *, experiment_id: str = EXPERIMENT_ID) -> Experiment:
    experiment = experiments_read(connection).get(experiment_id.lower())
    if experiment is None:
        raise LookupError(f"no experiment {experiment_id!r}: was the bench configuration applied?")
    return experiment


def assignments_store(connection: psycopg.Connection, experiment: Experiment, subject_ids: list[str]) -> dict[str, str]:
    """Each distinct subject's variant ID, storing the missing assignments (the array statements)."""
    distinct = list(dict.fromkeys(subject_ids))
    stored = dict(connection.execute(FETCH_ARRAYS, [distinct, experiment.pk]).fetchall())
    missing = sorted(subject_id for subject_id in distinct if subject_id not in stored)
    if missing:
        variants = [experiment.allocation.variant_for(experiment.salt, subject_id) for subject_id in missing]
        inserted = dict(
            connection.execute(
                INSERT_ARRAYS, [experiment.pk, experiment.cohort, datetime.now(UTC), missing, variants]
            ).fetchall()
        )
        stored.update(inserted)
        lost = [subject_id for subject_id in missing if subject_id not in inserted]
        if lost:
            stored.update(connection.execute(FETCH_ARRAYS, [lost, experiment.pk]).fetchall())
    return {subject_id: experiment.variant_keys[stored[subject_id]] for subject_id in distinct}


_distributed: weakref.WeakKeyDictionary[psycopg.Connection, bool] = weakref.WeakKeyDictionary()


def assignments_distributed(connection: psycopg.Connection) -> bool:
    """Whether assignments_assignment is a distributed Citus table, asked once per connection
    (what assignments/citus/table_layout.py asks of Django's connection)."""
    known = _distributed.get(connection)
    if known is None:
        with connection.cursor() as cursor:
            known = distributed_asked(cursor, "assignments_assignment")
        _distributed[connection] = known
    return known


def pairs_fetch(
    connection: psycopg.Connection, subjects: dict[int, list[str]], *, experiment_pk: int | None = None
) -> Stored:
    """assignments/storage.py's fetch: the head row (experiment_pk's resource_version, or the catalog's version
    without it), ignored here, then the stored variant of each (experiment pk, subject ID) pair that has one."""
    steps = pairs_fetch_steps(subjects, experiment_pk=experiment_pk, distributed=assignments_distributed(connection))
    return steps_run(connection, steps)


def pairs_fetch_steps(
    subjects: dict[int, list[str]],
    *,
    experiment_pk: int | None = None,
    distributed: bool = False,
    provenance: Provenance | None = None,
) -> Steps[Stored]:
    """pairs_fetch's statements; `distributed`: assignments_distributed's answer for the connection; each stored
    pair's cohort and source go into `provenance` when given."""
    fetched = yield from _fetched(subjects, experiment_pk=experiment_pk, distributed=distributed, provenance=provenance)
    return fetched[0]


def _fetched(
    subjects: dict[int, list[str]],
    *,
    experiment_pk: int | None,
    distributed: bool,
    provenance: Provenance | None = None,
) -> Steps[tuple[Stored, Shards | None]]:
    """pairs_fetch's pairs, and on Citus the shard of each subject ID when the read went shard by shard. Its
    rows are (experiment pk, subject ID, variant pk, cohort, source, the head's version): each stored row's
    cohort and source go into `provenance` when given (what an OpenFeature evaluation answers), as the service
    keeps them only when asked."""
    head = [] if experiment_pk is None else [experiment_pk]
    if distributed:
        # Its filters select every experiment's row of every subject ID: only the pairs asked are kept.
        subject_ids = sorted({subject_id for ids in subjects.values() for subject_id in ids})

        def citus_fetch(connection: psycopg.Connection):
            return citus_fetch_rows(
                lambda sql, params: connection.execute(sql, params).fetchall(),
                head_sql=POSTGRES_HEAD_EXPERIMENT if head else POSTGRES_HEAD_CATALOG,
                head=head,
                experiments=list(subjects),
                subject_ids=subject_ids,
            )

        rows, shards = yield citus_fetch
        asked = {pk: set(ids) for pk, ids in subjects.items()}
        kept = [row for row in rows if row[0] is not None and row[1] in asked[row[0]]]
    else:
        rows = yield Statement(
            FETCH[("postgresql", experiment_pk is not None)],
            [*head, json_text({str(pk): subject_ids for pk, subject_ids in subjects.items()})],
        )
        kept, shards = [row for row in rows if row[0] is not None], None
    if provenance is not None:
        provenance.update(((pk, subject_id), (cohort, source)) for pk, subject_id, _, cohort, source, _ in kept)
    return {(pk, subject_id): variant_pk for pk, subject_id, variant_pk, _, _, _ in kept}, shards


def _copier(connection: psycopg.Connection, now: datetime):
    """citus_store's `copy` on this autocommit connection: each shard's COPY is its own transaction."""

    def copy(rows) -> bool:
        try:
            with connection.cursor().copy(CITUS_COPY) as writer:
                for row in rows:
                    writer.write_row((*row, now))
        except psycopg.Error:
            return False
        return True

    return copy


def pairs_store(
    connection: psycopg.Connection,
    experiments: Iterable[Experiment],
    subjects: dict[int, list[str]],
    *,
    experiment_pk: int | None = None,
    attributes: Attributes | None = None,
) -> tuple[Stored, set[tuple[int, str]], Excluded]:
    """The stored variant pk of every (experiment pk, subject ID) pair asked, storing the missing ones that the
    gates let in (from `attributes`), with assignments/storage.py's statements: fetch, the link walk for the
    experiments that follow links (a linked identifier's assignment carried over, source `linked`), insert,
    and a re-read of conflict losers only. Returns them, the pairs this call stored and those the gates kept
    out, each with its reason."""
    steps = pairs_store_steps(
        experiments,
        subjects,
        experiment_pk=experiment_pk,
        attributes=attributes,
        distributed=assignments_distributed(connection),
    )
    return steps_run(connection, steps)


def pairs_store_steps(
    experiments: Iterable[Experiment],
    subjects: dict[int, list[str]],
    *,
    experiment_pk: int | None = None,
    attributes: Attributes | None = None,
    distributed: bool = False,
    provenance: Provenance | None = None,
) -> Steps[tuple[Stored, set[tuple[int, str]], Excluded]]:
    """pairs_store's statements; `distributed`: assignments_distributed's answer for the connection; the cohort
    and source of each pair stored or found go into `provenance` when given."""
    by_pk = {experiment.pk: experiment for experiment in experiments}
    asked = dict(subjects)
    for pk, subject_ids in subjects.items():
        for holdout in by_pk[pk].holdouts:
            asked[holdout.pk] = list(dict.fromkeys([*asked.get(holdout.pk, []), *subject_ids]))
    stored, shards = yield from _fetched(
        asked, experiment_pk=experiment_pk, distributed=distributed, provenance=provenance
    )
    missing = sorted(
        (pk, subject_id)
        for pk, subject_ids in subjects.items()
        for subject_id in subject_ids
        if (pk, subject_id) not in stored
    )
    if not missing:
        return stored, set(), {}
    now = datetime.now(UTC)
    # Gates 1 to 4 first, as the service screens them (the window once per experiment): only the
    # subjects they let through are walked.
    sent = attributes or {}
    windows = {pk: by_pk[pk].gates.window_reason(now) for pk in subjects}
    entering = []
    excluded: Excluded = {}
    memberships: dict[tuple[int, str], list] = {}
    for pk, subject_id in missing:
        experiment = by_pk[pk]
        reason = None
        if experiment.screened:
            reason = windows[pk] or experiment.gates.screen_open(
                subject_id,
                sent.get(subject_id, {}),
                held_out=bool(experiment.holdouts) and experiment.held_out(subject_id, stored, memberships),
            )
        if reason is None:
            entering.append((pk, subject_id))
        else:
            excluded[(pk, subject_id)] = reason
    following = [(pk, by_pk[pk].subject_type_pk, subject_id) for pk, subject_id in entering if by_pk[pk].follow_links]
    linked: Stored = {}
    if following:
        graph = link_graph((yield Statement(POSTGRES_LINK_GRAPH, link_graph_params(following))))
        linked = linked_first(following, graph).variants
    rows = []
    for pk, subject_id in entering:
        experiment = by_pk[pk]
        variant_pk = linked.get((pk, subject_id))
        if variant_pk is not None:
            rows.append([pk, subject_id, variant_pk, experiment.cohort, "linked"])
            continue
        variant_pk = covered_variant(
            experiment.gates, experiment.allocation, salt=experiment.salt, subject_id=subject_id
        )
        if variant_pk is None:
            excluded[(pk, subject_id)] = OUTSIDE_COVERAGE
        else:
            rows.append([pk, subject_id, variant_pk, experiment.cohort, "hashed"])
    if memberships:
        # One sorted batch, as the service inserts it.
        rows = sorted([*rows, *memberships.values()], key=lambda row: (row[0], row[1]))
    if not rows:
        return stored, set(), excluded
    if distributed:

        def citus_insert(connection: psycopg.Connection):
            return citus_store(
                lambda sql, params: connection.execute(sql, params).fetchall(),
                _copier(connection, now),
                rows,
                now,
                context=connection,
                shards=shards,
            )

        inserted = yield citus_insert
    else:
        returned = yield Statement(POSTGRES_INSERT, [now, json_text(rows)])
        inserted = {(pk, subject_id): variant_pk for pk, subject_id, variant_pk in returned}
    stored.update(inserted)
    lost: dict[int, list[str]] = {}
    for pk, subject_id, _, cohort, source in rows:
        if (pk, subject_id) not in inserted:
            lost.setdefault(pk, []).append(subject_id)
        elif provenance is not None:
            provenance[(pk, subject_id)] = (cohort, source)
    if lost:
        again = pairs_fetch_steps(lost, experiment_pk=experiment_pk, distributed=distributed, provenance=provenance)
        stored.update((yield from again))
    return stored, set(inserted), excluded


def subject_types_read(connection: psycopg.Connection) -> dict[str, int]:
    """The primary key of each active subject type, by its lower-cased ID."""
    return steps_run(connection, subject_types_steps())


def subject_types_steps() -> Steps[dict[str, int]]:
    """subject_types_read's statement."""
    return dict((yield Statement(SUBJECT_TYPES)))


def link_pair(subject_types: dict[str, int], subject_id: str) -> list[tuple[int, str]]:
    """The bench's new pair, user:<ID> and cookie:<ID>, in the canonical order the service stores."""
    return sorted([(subject_types["user"], subject_id), (subject_types["cookie"], subject_id)])


def link_store(connection: psycopg.Connection, nodes: list[tuple[int, str]]) -> None:
    """Link two (subject type pk, subject ID) nodes given in canonical order; a linked pair stays as it is."""
    steps_run(connection, link_steps(nodes))


def link_steps(nodes: list[tuple[int, str]]) -> Steps[None]:
    """link_store's statement."""
    (type_a, subject_id_a), (type_b, subject_id_b) = nodes
    yield Statement(LINK_INSERT, [type_a, subject_id_a, type_b, subject_id_b, datetime.now(UTC)])


class BaselineWorker:
    """Raw SQL for one scenario. An OpenFeature evaluation (single or bulk) sends the statements of its
    POST /assignments twin: the same subject in the same experiments (for the bulk, those it lists)."""

    def __init__(self, *, database_url: str, scenario: Scenario, subject_ids: SubjectIds) -> None:
        if scenario.kind not in (ASSIGN, LINK, *ONE_SUBJECT):
            raise ValueError(f"the baseline has no equivalent of scenario {scenario.key}")
        self.connection = psycopg.connect(database_url, autocommit=True)
        self.scenario = scenario
        self.subject_ids = subject_ids
        if scenario.kind == LINK:
            self.subject_types = subject_types_read(self.connection)
            return
        catalog = experiments_read(self.connection)
        named = scenario.named
        missing = [key for key in named if key.lower() not in catalog]
        if missing:
            raise LookupError(f"no experiment {', '.join(missing)}: was the bench configuration applied?")
        self.experiments = [catalog[key.lower()] for key in named]
        self.array_statements = not scenario.service_sql and not assignments_distributed(self.connection)

    def prepare(self) -> tuple[list[str], Attributes]:
        ids = self.subject_ids.next_batch()
        return ids, attributes_sent(self.scenario, ids)

    def send(self, request: tuple[list[str], Attributes]) -> tuple[dict[str, str], dict[str, str]] | None:
        """The variant ID by subject ID (by experiment ID for POST /assignments), the control for those the gates
        kept out, and the reason of each of those."""
        ids, attributes = request
        if self.scenario.kind == LINK:
            return link_store(self.connection, link_pair(self.subject_types, ids[0]))
        if self.scenario.kind in ONE_SUBJECT:
            # One user in each experiment named; the fetch's head is the catalog's version, as the service's.
            stored, _, excluded = pairs_store(
                self.connection,
                self.experiments,
                {experiment.pk: ids for experiment in self.experiments},
                attributes=attributes,
            )
            return (
                {e.key: e.variant_keys[stored[(e.pk, ids[0])]] for e in self.experiments if (e.pk, ids[0]) in stored},
                {e.key: excluded[(e.pk, ids[0])] for e in self.experiments if (e.pk, ids[0]) in excluded},
            )
        (experiment,) = self.experiments
        if self.array_statements:
            return assignments_store(self.connection, experiment, ids), {}
        distinct = list(dict.fromkeys(ids))
        stored, _, excluded = pairs_store(
            self.connection, [experiment], {experiment.pk: distinct}, experiment_pk=experiment.pk, attributes=attributes
        )
        return (
            {
                subject_id: experiment.variant_keys[stored[(experiment.pk, subject_id)]]
                if (experiment.pk, subject_id) in stored
                else experiment.control_key
                for subject_id in distinct
            },
            {subject_id: reason for (_, subject_id), reason in excluded.items()},
        )

    def check(self, request: tuple[list[str], Attributes], answer: tuple[dict[str, str], dict[str, str]] | None) -> int:
        ids = request[0]
        if self.scenario.kind == LINK:
            return len(ids)
        assignments, excluded = answer
        if self.scenario.kind == ASSIGN:
            (experiment,) = self.experiments
            if assignments.keys() != set(ids):
                raise AssertionError(f"{len(assignments)} assignments for {len(set(ids))} subjects")
            problem = exclusions_problem(
                experiment=experiment, ids=ids, profiles=self.scenario.attributes, excluded=excluded
            )
            if problem:
                raise AssertionError(problem)
            return len(ids)
        kept_out = {
            experiment.key: reason
            for experiment in self.experiments
            for reason in excluded_expected(experiment=experiment, ids=ids, profiles=self.scenario.attributes).values()
        }
        if assignments.keys() | excluded.keys() != {experiment.key for experiment in self.experiments}:
            raise AssertionError(f"{len(assignments)} assignments for {len(self.experiments)} experiments")
        if excluded != kept_out:
            raise AssertionError(f"{len(excluded)} kept out where the gates keep out {len(kept_out)}")
        return len(ids)

    def close(self) -> None:
        self.connection.close()
