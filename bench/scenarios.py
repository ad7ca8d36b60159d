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

# What a request does: POST /experiment-assignments, POST /assignments, POST /id-link or GET /healthz.
ASSIGN = "assign"
SUBJECT = "subject"
LINK = "link"
HEALTHZ = "healthz"


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    kind: str
    new: int = 0  # subject IDs per request that have no assignment (or link) yet
    existing: int = 0  # subject IDs per request drawn from the seeded, already assigned ones
    # POST /experiment-assignments: the experiment asked.
    experiment_id: str = EXPERIMENT_ID
    # POST /assignments: the experiments named, for one subject known by its user ID.
    experiments: tuple[str, ...] = ()
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
            ids.extend(seeded_subject_id(n) for n in self.random.sample(range(self.seeded), self.scenario.existing))
        return ids
