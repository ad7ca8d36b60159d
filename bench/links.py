"""Identifier links for the followLinks scenarios, and the pool of linked new cookies they ask for.

`links_seed` stores, by COPY (as bench/seed.py stores assignments), a link graph
shaped like a site's logins:

- users seed-00000000 ... (--linked-users of them, the IDs of the users seeded
  into checkout-button) each linked to two cookies, seedc-<2u> (a first device)
  and seedc-<2u+1>; every tenth user's second cookie is also linked to the next
  user (a shared device), so walks reach a few users and cookies, not one: 2.1
  links per user;
- the first cookie of each user assigned, as the service would have assigned it
  (hashed, current cohort), in banner-copy (followLinks) and in its copy
  banner-copy-nolinks, so both experiments have the same stored cookies.

The scenarios' linked new cookies come from a `LinkPool`: cookies
<run ID>-pool-<n>, each linked to a seeded user (scattered: user n * 7919 mod
--linked-users) whose first cookie is assigned, stored between runs and each asked
for once in an invocation (bench/pools.py), so it is new in the experiment that gets it.
The walk from one goes cookie, user, that user's cookies (the assigned first
one among them: the variant carried over), and on through shared devices to
depth 4; from an unlinked new cookie it finds no link at all.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.baseline import experiments_read, subject_types_read
from bench.pools import Pool
from bench.scenarios import LINKS_EXPERIMENT_ID, NOLINKS_EXPERIMENT_ID, seeded_subject_id

LINK_COPY = (
    "COPY idlinks_identifierlink (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, created_at) "
    "FROM STDIN"
)
ASSIGNMENT_COPY = (
    "COPY assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source) FROM STDIN"
)
SHARED_DEVICE_EVERY = 10
POOL_SCATTER = 7919


def seeded_cookie_id(number: int) -> str:
    return f"seedc-{number:08d}"


def _link(types: dict[str, int], user_id: str, cookie_id: str, created_at: datetime) -> tuple:
    """A user-cookie link's row, in the canonical order the service stores (idlinks/services.py)."""
    (type_a, id_a), (type_b, id_b) = sorted([(types["user"], user_id), (types["cookie"], cookie_id)])
    return type_a, id_a, type_b, id_b, created_at


def links_seed(*, database_url: str, users: int) -> dict[str, Any]:
    """Store the seeded link graph and the first cookies' assignments, unless a reused database has them."""
    started = time.monotonic()
    with psycopg.connect(database_url, autocommit=True) as connection:
        types = subject_types_read(connection)
        catalog = experiments_read(connection)
        experiments = [catalog[key] for key in (LINKS_EXPERIMENT_ID, NOLINKS_EXPERIMENT_ID)]
        first = _link(types, seeded_subject_id(0), seeded_cookie_id(0), datetime.now(UTC))
        present = connection.execute(
            "SELECT 1 FROM idlinks_identifierlink WHERE subject_type_a_id = %s AND subject_id_a = %s "
            "AND subject_type_b_id = %s AND subject_id_b = %s",
            first[:4],
        ).fetchone()
        if present is None:
            created_at = datetime.now(UTC)
            with connection.cursor().copy(LINK_COPY) as copy:
                for user in range(users):
                    user_id = seeded_subject_id(user)
                    copy.write_row(_link(types, user_id, seeded_cookie_id(2 * user), created_at))
                    copy.write_row(_link(types, user_id, seeded_cookie_id(2 * user + 1), created_at))
                    if user % SHARED_DEVICE_EVERY == SHARED_DEVICE_EVERY - 1 and user + 1 < users:
                        copy.write_row(
                            _link(types, seeded_subject_id(user + 1), seeded_cookie_id(2 * user + 1), created_at)
                        )
            with connection.cursor().copy(ASSIGNMENT_COPY) as copy:
                for experiment in experiments:
                    for user in range(users):
                        cookie_id = seeded_cookie_id(2 * user)
                        variant = experiment.allocation.variant_for(experiment.salt, cookie_id)
                        copy.write_row((experiment.pk, cookie_id, variant, experiment.cohort, created_at, "hashed"))
            connection.execute("VACUUM ANALYZE idlinks_identifierlink")
            connection.execute("VACUUM ANALYZE assignments_assignment")
            connection.execute("VACUUM ANALYZE assignments_assignmentcount")
        (links,) = connection.execute("SELECT count(*) FROM idlinks_identifierlink").fetchone()
        cookies = connection.execute(
            "SELECT count(*) FROM assignments_assignment WHERE experiment_id = %s", [experiments[0].pk]
        ).fetchone()[0]
    return {
        "linked_users": users,
        "seeded": present is None,
        "seconds": time.monotonic() - started,
        "links": links,
        "assigned_cookies": cookies,
    }


class LinkPool(Pool):
    """New cookies linked through a seeded user to an assigned cookie."""

    name = "pool of linked cookies"
    # Raw SQL on an idle 2-core machine took about 7,000 a second.
    per_second = 15_000

    def __init__(self, *, database_url: str, prefix: str, users: int) -> None:
        super().__init__(database_url=database_url, prefix=prefix)
        self.users = users
        with psycopg.connect(database_url, autocommit=True) as connection:
            self.types = subject_types_read(connection)

    def subject_id(self, number: int) -> str:
        return f"{self.prefix}-pool-{number:09d}"

    def store(self, connection: psycopg.Connection, start: int, end: int) -> None:
        created_at = datetime.now(UTC)
        with connection.cursor().copy(LINK_COPY) as copy:
            for number in range(start, end):
                user_id = seeded_subject_id(number * POOL_SCATTER % self.users)
                copy.write_row(_link(self.types, user_id, self.subject_id(number), created_at))


# Of this invocation's new cookies in the two experiments: how many were stored with each source, pool
# cookies (linked to an assigned one) apart from the others.
OUTCOME = """
SELECT e.key, a.subject_id LIKE %(pool)s AS pooled, a.source, count(*)
FROM assignments_assignment a JOIN assignments_experiment e ON e.id = a.experiment_id
WHERE e.key IN (%(links)s, %(nolinks)s) AND a.subject_id LIKE %(run)s
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""


def links_outcome(connection: psycopg.Connection, *, prefix: str) -> dict[str, Any]:
    """What the followLinks scenarios stored: in banner-copy every pool cookie should be `linked` and every
    other new cookie `hashed`; in banner-copy-nolinks all `hashed`."""
    rows = connection.execute(
        OUTCOME,
        {
            "pool": f"{prefix}-pool-%",
            "links": LINKS_EXPERIMENT_ID,
            "nolinks": NOLINKS_EXPERIMENT_ID,
            "run": f"{prefix}-%",
        },
    ).fetchall()
    counts = [
        {"experiment": key, "pool": pooled, "source": source, "assignments": n} for key, pooled, source, n in rows
    ]
    expected = all(
        row["source"] == ("linked" if row["experiment"] == LINKS_EXPERIMENT_ID and row["pool"] else "hashed")
        for row in counts
    )
    return {"counts": counts, "as_expected": expected}
