"""What one request asks for in each scenario, and the subject IDs that make it so."""

from __future__ import annotations

import random
from dataclasses import dataclass

EXPERIMENT_ID = "checkout-button"


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    new: int  # subjects per request that have no assignment yet
    existing: int  # subjects per request drawn from the seeded, already assigned ones

    @property
    def subjects(self) -> int:
        return self.new + self.existing


SCENARIOS = {
    scenario.key: scenario
    for scenario in (
        Scenario("a", "1 new", new=1, existing=0),
        Scenario("b", "100 new", new=100, existing=0),
        Scenario("c", "1000 new", new=1000, existing=0),
        Scenario("d", "100 existing", new=0, existing=100),
        Scenario("e", "100 mixed, 50% existing", new=50, existing=50),
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
