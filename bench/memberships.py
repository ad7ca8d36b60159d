"""Users who are members of bench-layered's holdouts already, for the scenario whose batches send them.

A holdout usually covers many experiments, so most subjects that reach a new
experiment of its scope are its members already: the first experiment that
asked for them stored their memberships. `MemberPool` hands out new users
<run ID>-member-<n> whose membership of each active holdout covering
bench-layered is stored (source hashed, the holdout's current cohort, the
variant by the holdout's formula, as the service would have stored it) and who
have no assignment in bench-layered: a batch of them reads 2 memberships a user
and stores the experiment's rows only.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg

from bench.baseline import experiment_read
from bench.pools import Pool
from bench.scenarios import LAYERED_EXPERIMENT_ID

ASSIGNMENT_COPY = (
    "COPY assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source) FROM STDIN"
)


class MemberPool(Pool):
    name = "pool of holdout members"
    # Raw SQL took up to 29,000 users a second of them on a 2-core machine.
    per_second = 35_000

    def __init__(self, *, database_url: str, prefix: str) -> None:
        super().__init__(database_url=database_url, prefix=prefix)
        with psycopg.connect(database_url, autocommit=True) as connection:
            self.holdouts = experiment_read(connection, experiment_id=LAYERED_EXPERIMENT_ID).holdouts
        if not self.holdouts:
            raise LookupError(f"no active holdout covers {LAYERED_EXPERIMENT_ID}: was the bench configuration applied?")

    def subject_id(self, number: int) -> str:
        return f"{self.prefix}-member-{number:09d}"

    def store(self, connection: psycopg.Connection, start: int, end: int) -> None:
        created_at = datetime.now(UTC)
        with connection.cursor().copy(ASSIGNMENT_COPY) as copy:
            for holdout in self.holdouts:
                for number in range(start, end):
                    subject_id = self.subject_id(number)
                    variant = holdout.allocation.variant_for(holdout.salt, subject_id)
                    copy.write_row((holdout.pk, subject_id, variant, holdout.cohort, created_at, "hashed"))
