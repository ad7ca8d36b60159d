"""What one request asks for in each scenario, and the subject IDs that make it so."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

EXPERIMENT_ID = "checkout-button"
# examples/demo.yaml's cookie experiment with spec.followLinks: true, and bench/hot_path_resources.yaml's copy
# of it without: the same variants and subject type, so the two differ only in following links.
LINKS_EXPERIMENT_ID = "banner-copy"
NOLINKS_EXPERIMENT_ID = "banner-copy-nolinks"
# bench/hot_path_resources.yaml: 20 active experiments on subject type user, none following links.
SUBJECT_EXPERIMENT_IDS = tuple(f"bench-user-{number:02d}" for number in range(1, 21))
# What an OpenFeature bulk evaluation of a user lists: every active user experiment whose bulkEvaluation is true,
# in ID order. That is examples/demo.yaml's checkout-button and the 20 above: bench/hot_path_resources.yaml's
# other user experiments (the gates' and the layer's) have bulkEvaluation: false.
BULK_EXPERIMENT_IDS = tuple(sorted((EXPERIMENT_ID, *SUBJECT_EXPERIMENT_IDS), key=str.lower))
# The seeded subjects (seeded_subject_id(0..n-1)) that are also stored in every experiment of
# BULK_EXPERIMENT_IDS before a run that draws from them (bench/seed.py, stored_seed): a stored user of the bulk
# evaluation and of its POST /assignments twin.
BULK_STORED = 10_000
# bench/hot_path_resources.yaml's user experiments with bench-user-01's variants that differ only in their
# gates: none; targeting, coverage 0.5 and an open enrollment window; the same targeting, coverage 1 and window.
UNGATED_EXPERIMENT_ID = "bench-ungated"
GATED_EXPERIMENT_ID = "bench-gated"
GATED_ALL_EXPERIMENT_ID = "bench-gated-all"
# bench/hot_path_resources.yaml's user experiment with bench-user-01's variants in a layer, all of whose
# slots it owns, and covered by two holdouts.
LAYERED_EXPERIMENT_ID = "bench-layered"

# A user's attributes, as examples/demo.yaml's subject type declares them. Each of PASSING passes the
# targeting of bench-gated and bench-gated-all, through either side of its anyOf; MIXED adds a user of
# another country (not_targeted) and one sent without its plan (attributes_missing).
PASSING: tuple[dict[str, object], ...] = (
    {"country": "DE", "plan": "pro", "seats": 12, "appVersion": "2.3.1"},
    {"country": "AT", "plan": "team", "seats": 2, "appVersion": "2.6.0"},
    {"country": "NL", "plan": "pro", "seats": 40, "appVersion": "3.0"},
    {"country": "CH", "plan": "team", "seats": 5, "appVersion": "2.4.0"},
)
MIXED: tuple[dict[str, object], ...] = (
    *PASSING,
    {"country": "US", "plan": "pro", "seats": 12, "appVersion": "2.6.0"},
    {"country": "DE", "seats": 12, "appVersion": "2.6.0"},
)

# What a request does: POST /experiment-assignments, POST /assignments, POST /id-link, GET /healthz, or an
# OpenFeature evaluation (OFREP): POST /ofrep/v1/evaluate/flags/{key} of one experiment for one subject, which is
# POST /assignments for that subject and experiment, and POST /ofrep/v1/evaluate/flags, the bulk evaluation of
# every experiment of a subject type listed for it.
ASSIGN = "assign"
SUBJECT = "subject"
LINK = "link"
HEALTHZ = "healthz"
OFREP = "ofrep"
OFREP_BULK = "ofrep-bulk"
# The kinds that ask for one subject (a user) in the experiments named (`Scenario.experiments`).
ONE_SUBJECT = (SUBJECT, OFREP, OFREP_BULK)
OFREP_FLAGS_PATH = "/ofrep/v1/evaluate/flags"
PATHS = {
    ASSIGN: "/experiment-assignments",
    SUBJECT: "/assignments",
    LINK: "/id-link",
    HEALTHZ: "/healthz",
    OFREP: OFREP_FLAGS_PATH + "/{key}",
    OFREP_BULK: OFREP_FLAGS_PATH,
}


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    kind: str
    new: int = 0  # subject IDs per request that have no assignment (or link) yet
    existing: int = 0  # subject IDs per request drawn from the seeded, already assigned ones
    # POST /experiment-assignments: the experiment asked.
    experiment_id: str = EXPERIMENT_ID
    # POST /assignments: the experiments named, for one subject known by its user ID; an OpenFeature single
    # evaluation: the one experiment evaluated; a bulk evaluation: the experiments it should list.
    experiments: tuple[str, ...] = ()
    # The existing subjects are drawn from the first n seeded ones, which are also stored in every experiment
    # named (BULK_STORED, bench/seed.py's stored_seed); 0: from all seeded subjects (stored in checkout-button).
    existing_among: int = 0
    # Every n-th new subject is a new cookie linked, before the request, to a seeded user whose
    # first cookie is assigned (bench/links.py); 0: none.
    linked_every: int = 0
    # Every new subject is a user who is a member of the experiment's holdouts already (bench/memberships.py).
    members: bool = False
    # The raw-SQL baseline sends assignments/storage.py's statements (JSON parameters, the fetch with
    # its head row, the insert of (experiment, subject, variant, cohort, source) rows, the link walk).
    # The original /experiment-assignments scenarios keep the array statements of bench/baseline.py
    # they were first measured with.
    service_sql: bool = False
    # The attributes sent: the subject at position n of a request has attributes[n % len(attributes)];
    # empty: none sent.
    attributes: tuple[dict[str, object], ...] = ()
    # The scenario without gates that the report sets this one against: the same request to an experiment
    # that differs only in having no gates.
    reference: str | None = None

    @property
    def subjects(self) -> int:
        return self.new + self.existing

    @property
    def named(self) -> tuple[str, ...]:
        """The experiments the request asks for, or (a bulk evaluation) lists."""
        return self.experiments if self.kind in ONE_SUBJECT else (self.experiment_id,)

    @property
    def path(self) -> str:
        """The request's path: a single OpenFeature evaluation names its experiment in it."""
        return PATHS[self.kind].format(key=self.experiments[0] if self.kind == OFREP else "")

    def existing_pool(self, seeded: int) -> int:
        """How many seeded subjects the existing ones are drawn from, of `seeded`."""
        return min(seeded, self.existing_among) if self.existing_among else seeded

    @property
    def per_subject(self) -> bool:
        """Whether subjects per second, not requests per second, is the throughput that matters."""
        return self.subjects >= 1000


SCENARIOS = {
    scenario.key: scenario
    for scenario in (
        Scenario("1-new", "1 new subject", ASSIGN, new=1),
        Scenario("1-existing", "1 assigned subject", ASSIGN, existing=1),
        Scenario("100-new", "100 new subjects", ASSIGN, new=100),
        Scenario("1000-new", "1000 new subjects", ASSIGN, new=1000),
        Scenario("1000-existing", "1000 assigned subjects", ASSIGN, existing=1000),
        Scenario("healthz", "the health check, no token", HEALTHZ),
        # The pair is user:<new ID> and cookie:<the same ID>: two identifiers, never linked before.
        Scenario("id-link", "1 new identifier pair", LINK, new=1),
        Scenario(
            "subject-1",
            "1 new user in 1 experiment",
            SUBJECT,
            new=1,
            experiments=SUBJECT_EXPERIMENT_IDS[:1],
            service_sql=True,
        ),
        # The OpenFeature evaluations (OFREP) and their POST /assignments twins: the same subject, experiments and
        # statements, answered in OpenFeature's shape.
        Scenario(
            "subject-1-new",
            "1 new user in checkout-button",
            SUBJECT,
            new=1,
            experiments=(EXPERIMENT_ID,),
            service_sql=True,
        ),
        Scenario(
            "ofrep-1-new",
            "OpenFeature evaluation, 1 new user",
            OFREP,
            new=1,
            experiments=(EXPERIMENT_ID,),
            service_sql=True,
        ),
        Scenario(
            "subject-1-existing",
            "1 stored user in checkout-button",
            SUBJECT,
            existing=1,
            experiments=(EXPERIMENT_ID,),
            service_sql=True,
        ),
        Scenario(
            "ofrep-1-existing",
            "OpenFeature evaluation, 1 stored user",
            OFREP,
            existing=1,
            experiments=(EXPERIMENT_ID,),
            service_sql=True,
        ),
        Scenario(
            f"subject-{len(BULK_EXPERIMENT_IDS)}-existing",
            f"1 stored user in the {len(BULK_EXPERIMENT_IDS)} experiments a bulk evaluation lists",
            SUBJECT,
            existing=1,
            experiments=BULK_EXPERIMENT_IDS,
            existing_among=BULK_STORED,
            service_sql=True,
        ),
        Scenario(
            f"ofrep-bulk-{len(BULK_EXPERIMENT_IDS)}",
            f"OpenFeature bulk evaluation, 1 stored user in {len(BULK_EXPERIMENT_IDS)} experiments",
            OFREP_BULK,
            existing=1,
            experiments=BULK_EXPERIMENT_IDS,
            existing_among=BULK_STORED,
            service_sql=True,
        ),
        Scenario(
            "subject-20",
            "1 new user in 20 experiments",
            SUBJECT,
            new=1,
            experiments=SUBJECT_EXPERIMENT_IDS,
            service_sql=True,
        ),
        Scenario(
            "1-new-user",
            "1 new user, experiment without gates",
            ASSIGN,
            new=1,
            experiment_id=UNGATED_EXPERIMENT_ID,
            service_sql=True,
        ),
        Scenario(
            "1-new-gated",
            "1 new user with attributes, experiment with targeting it passes",
            ASSIGN,
            new=1,
            experiment_id=GATED_ALL_EXPERIMENT_ID,
            service_sql=True,
            attributes=PASSING,
            reference="1-new-user",
        ),
        Scenario(
            "subject-1-gated",
            "1 new user with attributes in 1 experiment with targeting it passes",
            SUBJECT,
            new=1,
            experiments=(GATED_ALL_EXPERIMENT_ID,),
            service_sql=True,
            attributes=PASSING,
            reference="subject-1",
        ),
        Scenario(
            "1000-new-user",
            "1000 new users, experiment without gates",
            ASSIGN,
            new=1000,
            experiment_id=UNGATED_EXPERIMENT_ID,
            service_sql=True,
        ),
        Scenario(
            "1000-new-gated",
            "1000 new users with attributes (1 in 3 kept out by the targeting), targeting and coverage 0.5",
            ASSIGN,
            new=1000,
            experiment_id=GATED_EXPERIMENT_ID,
            service_sql=True,
            attributes=MIXED,
            reference="1000-new-user",
        ),
        Scenario(
            "1000-new-gated-all",
            "1000 new users with attributes, targeting and coverage 1 that all of them pass",
            ASSIGN,
            new=1000,
            experiment_id=GATED_ALL_EXPERIMENT_ID,
            service_sql=True,
            attributes=PASSING,
            reference="1000-new-user",
        ),
        Scenario(
            "1000-new-layered",
            "1000 new users, experiment in a layer with two holdouts (a membership row in each)",
            ASSIGN,
            new=1000,
            experiment_id=LAYERED_EXPERIMENT_ID,
            service_sql=True,
            reference="1000-new-user",
        ),
        Scenario(
            "1000-members",
            "1000 users new to the experiment in a layer, members of its two holdouts already",
            ASSIGN,
            new=1000,
            experiment_id=LAYERED_EXPERIMENT_ID,
            members=True,
            service_sql=True,
            reference="1000-new-user",
        ),
        Scenario(
            "1000-new-nolinks",
            "1000 new cookies (1 in 10 linked to an assigned one), experiment without followLinks",
            ASSIGN,
            new=1000,
            experiment_id=NOLINKS_EXPERIMENT_ID,
            linked_every=10,
            service_sql=True,
        ),
        Scenario(
            "1000-new-links",
            "the same, experiment with followLinks",
            ASSIGN,
            new=1000,
            experiment_id=LINKS_EXPERIMENT_ID,
            linked_every=10,
            service_sql=True,
        ),
    )
}


def attributes_sent(scenario: Scenario, ids: list[str]) -> dict[str, dict[str, object]]:
    """Subject ID -> the attributes the scenario sends for it; empty when it sends none."""
    profiles = scenario.attributes
    if not profiles:
        return {}
    return {subject_id: profiles[position % len(profiles)] for position, subject_id in enumerate(ids)}


class Pooled(Protocol):
    """Where linked new cookies and holdout members come from (bench/pools.py); a protocol so that this module,
    which the pools import, imports nothing of them."""

    def take(self, count: int) -> list[str]: ...


def seeded_subject_id(number: int) -> str:
    return f"seed-{number:08d}"


class SubjectIds:
    """Subject ID batches for one load worker.

    New IDs carry the run's and the worker's prefix and a counter, so they are
    new in this database whatever ran before; existing ones are a random sample
    of the seeded IDs, so reads spread over the whole index. In a scenario with
    linked_every, that share of the new IDs are instead taken from the pool of
    linked cookies, and with members all of them from the pool of holdout
    members, each used once in the invocation.
    """

    def __init__(self, *, scenario: Scenario, prefix: str, seeded: int, seed: int, pool: Pooled | None = None) -> None:
        if scenario.existing > seeded:
            raise ValueError(f"scenario {scenario.key} needs {scenario.existing} seeded subjects, {seeded} exist")
        self.scenario = scenario
        self.prefix = prefix
        self.seeded = seeded
        self.counter = 0
        self.random = random.Random(seed)
        self.pool = pool if scenario.linked_every or scenario.members else None

    def next_batch(self) -> list[str]:
        if self.scenario.members:
            return self.pool.take(self.scenario.new)
        start = self.counter
        self.counter += self.scenario.new
        ids = [f"{self.prefix}-{number:010d}" for number in range(start, self.counter)]
        if self.pool is not None:
            every = self.scenario.linked_every
            linked = iter(self.pool.take(len(range(every - 1, len(ids), every))))
            ids = [next(linked) if position % every == every - 1 else value for position, value in enumerate(ids)]
        if self.scenario.existing:
            among = range(self.scenario.existing_pool(self.seeded))
            ids.extend(seeded_subject_id(n) for n in self.random.sample(among, self.scenario.existing))
        return ids
