"""The SQL of identifier links: the insert of /id-link (one statement per link), and the read of the
bounded walk of the link graph, whole or as a fragment that another statement composes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from django.db import connection

from core.citus import table_distributed
from core.commitorder import Position, after_filter
from core.database import json_text, timestamp_param
from core.steps import Statement, Steps
from idlinks.walk import FANOUT, MAX_LINK_ROWS, Links, Node

# identifierlink_pair_unique settles concurrent identical links: the loser inserts nothing.
# One statement in autocommit, where bulk_create(ignore_conflicts=True) would wrap it in a
# transaction of its own (three round trips).
INSERT = """
INSERT INTO idlinks_identifierlink (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, created_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b) DO NOTHING
"""


def id_link_insert_steps(
    *, vendor: str, subject_type_a: int, subject_id_a: str, subject_type_b: int, subject_id_b: str, created_at: datetime
) -> Steps[None]:
    """Store one link, already in canonical order; nothing if the pair was stored before."""
    # Prepared: its one plan does not depend on the table's size.
    yield Statement(
        INSERT,
        [subject_type_a, subject_id_a, subject_type_b, subject_id_b, timestamp_param(created_at, vendor=vendor)],
        prepare=True,
    )


# The neighbourhood of some identifiers, walked once for all of them: every identifier within
# %(depth)s links of any of the starts, through the links both ways, and the links out of those
# nearer than %(depth)s. The walk is shared: many starts near one busy identifier read its links
# once, not once each. Its rows carry their depth, so UNION ends it at that depth in a component
# full of cycles. On PostgreSQL each identifier's links are read at most %(fanout)s a side, so an
# identifier with a million links (a shared device, a bot) costs a bounded read. At most %(rows)s
# rows come back (walk.MAX_LINK_ROWS and one more, to tell that the bound was hit).
POSTGRES_NEIGHBOURS = """
    (SELECT l.subject_type_b_id, l.subject_id_b FROM idlinks_identifierlink l
     WHERE l.subject_type_a_id = {node}.type_id AND l.subject_id_a = {node}.subject_id LIMIT %(fanout)s)
    UNION ALL
    (SELECT l.subject_type_a_id, l.subject_id_a FROM idlinks_identifierlink l
     WHERE l.subject_type_b_id = {node}.type_id AND l.subject_id_b = {node}.subject_id LIMIT %(fanout)s)
"""

POSTGRES_WALK = """
WITH RECURSIVE walk(type_id, subject_id, depth) AS (
    SELECT (s.item ->> 0)::bigint, s.item ->> 1, 0 FROM json_array_elements(%(starts)s::json) AS s(item)
    UNION
    SELECT n.type_id, n.subject_id, w.depth + 1
    FROM walk w CROSS JOIN LATERAL ({walk_neighbours}) AS n(type_id, subject_id)
    WHERE w.depth < %(depth)s
), reached AS (
    SELECT type_id, subject_id, min(depth) AS depth FROM walk GROUP BY type_id, subject_id
){ctes}
SELECT r.type_id, r.subject_id, n.type_id, n.subject_id{padding}
FROM reached r CROSS JOIN LATERAL ({reached_neighbours}) AS n(type_id, subject_id)
WHERE r.depth < %(depth)s
{union}
LIMIT %(rows)s
"""

SQLITE_WALK = """
WITH RECURSIVE walk(type_id, subject_id, depth) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), 0 FROM json_each(%(starts)s)
    UNION
    SELECT l.subject_type_b_id, l.subject_id_b, w.depth + 1
    FROM walk w JOIN idlinks_identifierlink l ON l.subject_type_a_id = w.type_id AND l.subject_id_a = w.subject_id
    WHERE w.depth < %(depth)s
    UNION
    SELECT l.subject_type_a_id, l.subject_id_a, w.depth + 1
    FROM walk w JOIN idlinks_identifierlink l ON l.subject_type_b_id = w.type_id AND l.subject_id_b = w.subject_id
    WHERE w.depth < %(depth)s
), reached AS (
    SELECT type_id, subject_id, min(depth) AS depth FROM walk GROUP BY type_id, subject_id
){ctes}
SELECT r.type_id, r.subject_id, l.subject_type_b_id, l.subject_id_b{padding}
FROM reached r JOIN idlinks_identifierlink l ON l.subject_type_a_id = r.type_id AND l.subject_id_a = r.subject_id
WHERE r.depth < %(depth)s
UNION ALL
SELECT r.type_id, r.subject_id, l.subject_type_a_id, l.subject_id_a{padding}
FROM reached r JOIN idlinks_identifierlink l ON l.subject_type_b_id = r.type_id AND l.subject_id_b = r.subject_id
WHERE r.depth < %(depth)s
{union}
LIMIT %(rows)s
"""


def link_walk_sql(vendor: str, *, ctes: str = "", padding: str = "", union: str = "") -> str:
    """The statement of the walk on "postgresql" or "sqlite" (parameters: walk_params): a row (identifier,
    identifier) per link read, each followed by the columns `padding` lists (", NULL, ..."). A caller that
    reads more in the same round trip adds its CTEs (`ctes`, from ", name AS (...)"), which may join
    `reached` (type_id, subject_id, depth: each identifier the walk reached), and its rows (`union`, from
    "UNION ALL"); the LIMIT bounds them all."""
    if vendor == "postgresql":
        template = POSTGRES_WALK.replace("{walk_neighbours}", POSTGRES_NEIGHBOURS.format(node="w"))
        template = template.replace("{reached_neighbours}", POSTGRES_NEIGHBOURS.format(node="r"))
    else:
        template = SQLITE_WALK
    return template.replace("{ctes}", ctes).replace("{padding}", padding).replace("{union}", union)


LINKS_WITHIN = {vendor: link_walk_sql(vendor) for vendor in ("postgresql", "sqlite")}


def walk_params(*, starts: Iterable[Node], depth: int) -> dict:
    """The parameters of link_walk_sql's statement: the links within `depth` links of the starts."""
    return {
        "starts": json_text(sorted(starts)),
        "depth": depth,
        "fanout": FANOUT,
        # One more than the bound, so a graph exactly at the bound is told from one past it.
        "rows": MAX_LINK_ROWS + 1,
    }


# Citus refuses a recursive CTE over a distributed table: there the walk reads one level
# per statement, each sent to every shard at once (links are found by either side, and
# only side a is the distribution column), and stops at the first level that adds nothing.
# Most identifiers have no links: one statement.
CITUS_LINKS = """
SELECT subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b FROM idlinks_identifierlink
WHERE subject_id_a = ANY(%(ids)s::text[]) OR subject_id_b = ANY(%(ids)s::text[])
LIMIT %(limit)s
"""


def links_distributed() -> bool:
    """Whether the links table is distributed on Citus, where the walk reads level by level."""
    return table_distributed("idlinks_identifierlink")


def citus_links_within(cursor, *, starts: set[Node], depth: int) -> tuple[list[tuple[Node, Node]], set[Node]] | None:
    """What link_walk_sql's statement reads, level by level on Citus: the same links out of every identifier
    nearer than `depth`, up to FANOUT a side, and the identifiers reached; None once a level would take the
    rows read past MAX_LINK_ROWS (here a hub's links are read whole, then cut to FANOUT a side, so the bound
    counts the rows read, not only those kept)."""
    frontier = set(starts)
    reached = set(frontier)
    links: list[tuple[Node, Node]] = []
    for _ in range(depth):
        limit = MAX_LINK_ROWS + 1 - len(links)
        cursor.execute(CITUS_LINKS, {"ids": sorted({subject_id for _, subject_id in frontier}), "limit": limit})
        level = cursor.fetchall()
        if len(level) == limit:
            return None
        taken: Counter[tuple[Node, str]] = Counter()
        found: set[Node] = set()
        for type_a, id_a, type_b, id_b in level:
            for node, other, side in (((type_a, id_a), (type_b, id_b), "a"), ((type_b, id_b), (type_a, id_a), "b")):
                if node in frontier and taken[(node, side)] < FANOUT:
                    taken[(node, side)] += 1
                    links.append((node, other))
                    found.add(other)
        frontier = found - reached
        reached |= frontier
        if not frontier:
            break
    return links, reached


def links_within(*, start: Node, depth: int) -> Links:
    """The links within `depth` links of one identifier: one statement, on Citus one per level."""
    with connection.cursor() as cursor:
        if links_distributed():
            found = citus_links_within(cursor, starts={start}, depth=depth)
            return Links(links=[], complete=False) if found is None else Links(links=found[0])
        cursor.execute(LINKS_WITHIN[connection.vendor], walk_params(starts={start}, depth=depth))
        rows = cursor.fetchall()
    if len(rows) > MAX_LINK_ROWS:
        return Links(links=[], complete=False)
    return Links(links=[((type_a, id_a), (type_b, id_b)) for type_a, id_a, type_b, id_b in rows])


# The change feed's read of links (assignments/data/changes.py): the links stored after a position and
# below a horizon (core/commitorder.py), in (change_xid, id) order through identifierlink_change_order.
LINK_CHANGES = """
SELECT change_xid, id, recorded_at, subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, created_at
FROM idlinks_identifierlink
WHERE change_xid IS NOT NULL AND {after} AND change_xid < %s
ORDER BY change_xid, id LIMIT %s
"""
# A link's place among the changes of its transaction (core.commitorder.Position).
LINK_RANK = 1


def link_changes(*, after: Position, horizon: int, limit: int) -> list[tuple]:
    """Up to `limit` links stored after `after` by transactions below `horizon`, oldest first:
    (change_xid, id, recorded_at, subject type pk a, subject ID a, subject type pk b, subject ID b, created_at)."""
    condition, params = after_filter(rank=LINK_RANK, position=after, xid_column="change_xid", row_column="id")
    with connection.cursor() as cursor:
        cursor.execute(LINK_CHANGES.format(after=condition), [*params, horizon, limit])
        return cursor.fetchall()


LINK_LAST = """
SELECT change_xid, id FROM idlinks_identifierlink WHERE change_xid IS NOT NULL AND change_xid < %s
ORDER BY change_xid DESC, id DESC LIMIT 1
"""


def link_last_below(horizon: int) -> list[tuple[int, int]]:
    """(change_xid, id) of the last link stored by the transactions below `horizon`, if any."""
    with connection.cursor() as cursor:
        cursor.execute(LINK_LAST, [horizon])
        return cursor.fetchall()
