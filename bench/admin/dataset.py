"""The staff console's data: millions of assignments in one experiment, smaller experiments, identifier links.

Everything goes in by set-based statements (INSERT ... SELECT FROM generate_series)
with the count triggers on: filling assignments_assignmentcount is part of the
load time measured. Each variant is the one the service would assign (the hash
of assignments/hashing.py, computed in SQL and checked against it on a sample),
so the health panel's sample ratio test sees a real split, not a rigged 50/50.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from math import ceil
from typing import Any

import psycopg
from psycopg import sql

from assignments.hashing import SCALE
from bench.baseline import experiment_read
from bench.scenarios import EXPERIMENT_ID, seeded_subject_id
from bench.seed import counts_exact

# seeded_subject_id's format, so that bench/run hot-path's scenarios of existing subjects also work on this data.
USER_PREFIX = "seed-"
COOKIE_PREFIX = "ck-"
DIGITS = 8
MAX_SUBJECTS = 10**DIGITS
BATCH = 1_000_000
DAYS = 60
# Users linked to a cookie of their own, and the first cookies of those also linked to the next user
# (a shared device): a walk of depth 2 from a user then meets two cookies and two other users.
LINKED_USERS = 100_000
SHARED_COOKIES = 100

# created_at runs over the last DAYS days as a rollout ramping up: the square root makes the
# number of new assignments per day grow linearly, which the health panel's chart should show.
# u is the assignment formula's unsigned bucket number, as the README computes it in SQL. OFFSET 0 keeps
# the planner from copying the hash into every place that reads h or u: it is computed once a row.
INSERT = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT {experiment}, subject_id, CASE {arms} ELSE {fallback} END, {cohort},
       {start} + sqrt(n::float8 / {total}) * {days} * interval '1 day'
FROM (SELECT n, subject_id, h::numeric + CASE WHEN h < 0 THEN 18446744073709551616 ELSE 0 END AS u
      FROM (SELECT n, subject_id,
                   ('x' || substr(encode(sha256(convert_to({salt} || ':' || subject_id, 'UTF8')), 'hex'), 1, 16))
                   ::bit(64)::bigint AS h
            FROM (SELECT g AS n, {prefix} || lpad(g::text, {digits}, '0') AS subject_id
                  FROM generate_series({first}, {last}) AS g) AS s
            OFFSET 0) AS hashed) AS b
"""

# The canonical order (identifierlink_canonical_order) puts the lower (subject type pk, subject ID) on side a.
LINKS = """
INSERT INTO idlinks_identifierlink (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, created_at)
SELECT CASE WHEN o THEN ta ELSE tb END, CASE WHEN o THEN ia ELSE ib END,
       CASE WHEN o THEN tb ELSE ta END, CASE WHEN o THEN ib ELSE ia END, now()
FROM (SELECT *, (ta, ia COLLATE "C") < (tb, ib COLLATE "C") AS o FROM (
    SELECT %(user)s::bigint AS ta, %(user_prefix)s || lpad(g::text, %(digits)s, '0') AS ia,
           %(cookie)s::bigint AS tb, %(cookie_prefix)s || lpad(g::text, %(digits)s, '0') AS ib
    FROM generate_series(0, %(linked)s - 1) AS g
    UNION ALL
    SELECT %(cookie)s, %(cookie_prefix)s || lpad(g::text, %(digits)s, '0'),
           %(user)s, %(user_prefix)s || lpad((g + 1)::text, %(digits)s, '0')
    FROM generate_series(0, %(shared)s - 1) AS g
) AS pairs) AS p
"""


@dataclass(frozen=True)
class ExperimentLoad:
    experiment: str
    prefix: str
    count: int


# Loaded first, so its assignments have the lowest IDs: the lists ordered by descending ID must
# pass the millions of newer assignments of other experiments to find a page of its own.
OLDER_EXPERIMENT = "onboarding-email"


def experiment_loads(assignments: int) -> list[ExperimentLoad]:
    """In the order loaded."""
    return [
        ExperimentLoad(OLDER_EXPERIMENT, COOKIE_PREFIX, LINKED_USERS),
        ExperimentLoad(EXPERIMENT_ID, USER_PREFIX, assignments),
        ExperimentLoad("search-ranking", USER_PREFIX, min(assignments, 500_000)),
    ]


def _variant_case(variants: list[tuple[int, float]]) -> tuple[sql.Composable, sql.Composable]:
    """The WHEN arms and the ELSE of hashing.Allocation.choose, on the bucket number `u`."""
    cumulative = Fraction(0)
    arms = []
    for pk, split in variants:
        cumulative += Fraction(split)
        arms.append(sql.SQL("WHEN u < {} THEN {}").format(sql.Literal(ceil(cumulative * SCALE)), sql.Literal(pk)))
    fallback = [pk for pk, split in variants if split > 0][-1]
    return sql.SQL(" ").join(arms), sql.Literal(fallback)


def _assignments_insert(connection: psycopg.Connection, load: ExperimentLoad, start: datetime) -> float:
    """Inserts load.count assignments in batches of BATCH rows, one transaction each; returns the seconds taken."""
    experiment = experiment_read(connection, experiment_id=load.experiment)
    variants = connection.execute(
        "SELECT id, split FROM assignments_variant WHERE experiment_id = %s ORDER BY position", [experiment.pk]
    ).fetchall()
    arms, fallback = _variant_case(variants)
    seconds = 0.0
    for first in range(0, load.count, BATCH):
        last = min(first + BATCH, load.count) - 1
        statement = sql.SQL(INSERT).format(
            experiment=experiment.pk,
            arms=arms,
            fallback=fallback,
            cohort=experiment.cohort,
            start=sql.Literal(start),
            total=load.count,
            days=DAYS,
            salt=sql.Literal(experiment.salt),
            prefix=sql.Literal(load.prefix),
            digits=DIGITS,
            first=first,
            last=last,
        )
        started = time.monotonic()
        connection.execute(statement)
        elapsed = time.monotonic() - started
        seconds += elapsed
        rate = (last + 1 - first) / elapsed
        print(f"  {load.experiment}: {last + 1:,} of {load.count:,} ({rate:,.0f} rows/s)", flush=True)
    return seconds


def _variants_check(connection: psycopg.Connection, load: ExperimentLoad, samples: int = 50) -> None:
    """Raises unless sampled stored variants are those assignments/hashing.py gives."""
    experiment = experiment_read(connection, experiment_id=load.experiment)
    for number in range(0, load.count, max(1, load.count // samples)):
        subject_id = f"{load.prefix}{number:0{DIGITS}d}"
        (stored,) = connection.execute(
            "SELECT variant_id FROM assignments_assignment WHERE experiment_id = %s AND subject_id = %s",
            [experiment.pk, subject_id],
        ).fetchone()
        expected = experiment.allocation.variant_for(experiment.salt, subject_id)
        if stored != expected:
            raise AssertionError(f"{load.experiment} {subject_id}: stored variant {stored}, the hash gives {expected}")


def dataset_load(*, database_url: str, assignments: int) -> dict[str, Any]:
    """Loads the data, VACUUM ANALYZEs it and checks it; returns what it did and how long it took."""
    if not 0 < assignments <= MAX_SUBJECTS:
        raise ValueError(f"--assignments must be between 1 and {MAX_SUBJECTS:,}")
    loaded = []
    with psycopg.connect(database_url, autocommit=True) as connection:
        start = datetime.now(UTC) - timedelta(days=DAYS)
        for load in experiment_loads(assignments):
            seconds = _assignments_insert(connection, load, start)
            loaded.append({"experiment": load.experiment, "assignments": load.count, "seconds": seconds})
        types = dict(connection.execute("SELECT lower(key), id FROM assignments_subjecttype").fetchall())
        started = time.monotonic()
        links = connection.execute(
            LINKS,
            {
                "user": types["user"],
                "cookie": types["cookie"],
                "user_prefix": USER_PREFIX,
                "cookie_prefix": COOKIE_PREFIX,
                "digits": DIGITS,
                "linked": LINKED_USERS,
                "shared": SHARED_COOKIES,
            },
        ).rowcount
        links_seconds = time.monotonic() - started
        print(f"  {links:,} identifier links in {links_seconds:.1f} s; VACUUM ANALYZE", flush=True)
        started = time.monotonic()
        connection.execute("VACUUM ANALYZE")
        vacuum_seconds = time.monotonic() - started
        for load in experiment_loads(assignments):
            _variants_check(connection, load)
        sizes = connection.execute(
            """SELECT pg_table_size('assignments_assignment'), pg_indexes_size('assignments_assignment'),
                      (SELECT count(*) FROM assignments_assignmentcount)"""
        ).fetchone()
        return {
            "experiments": loaded,
            "insert_seconds": sum(load["seconds"] for load in loaded),
            "links": links,
            "links_seconds": links_seconds,
            "vacuum_analyze_seconds": vacuum_seconds,
            "table_bytes": sizes[0],
            "index_bytes": sizes[1],
            "count_rows": sizes[2],
            "counts_exact": counts_exact(connection),
        }


def sample_subject() -> str:
    """A user in both user experiments, linked to two cookies (one shared) that are in the cookie experiment."""
    return seeded_subject_id(42)
