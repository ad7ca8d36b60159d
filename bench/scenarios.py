"""What one request asks for in each scenario, and the subject IDs that make it so."""

from __future__ import annotations

import random
from dataclasses import dataclass

EXPERIMENT_ID = "checkout-button"

# What a request does: POST /experiment-assignments, POST /id-link or GET /healthz.
ASSIGN = "assign"
LINK = "link"
HEALTHZ = "healthz"


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    kind: str
    new: int = 0  # subject IDs per request that have no assignment (or link) yet
    existing: int = 0  # subject IDs per request drawn from the seeded, already assigned ones

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
    )
}


def seeded_subject_id(number: int) -> str:
    return f"seed-{number:08d}"


class SubjectIds:
    """Subject ID batches for one load worker.

    New IDs carry the run's and the worker's prefix and a counter, so they are
    new in this database whatever ran before; existing ones are a random sample
    of the seeded IDs, so reads spread over the whole index.
    """

    def __init__(self, *, scenario: Scenario, prefix: str, seeded: int, seed: int) -> None:
        if scenario.existing > seeded:
            raise ValueError(f"scenario {scenario.key} needs {scenario.existing} seeded subjects, {seeded} exist")
        self.scenario = scenario
        self.prefix = prefix
        self.seeded = seeded
        self.counter = 0
        self.random = random.Random(seed)

    def next_batch(self) -> list[str]:
        start = self.counter
        self.counter += self.scenario.new
        ids = [f"{self.prefix}-{number:010d}" for number in range(start, self.counter)]
        if self.scenario.existing:
            ids.extend(seeded_subject_id(n) for n in self.random.sample(range(self.seeded), self.scenario.existing))
        return ids
