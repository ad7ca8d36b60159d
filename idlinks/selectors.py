"""Reads of identifier links: resolving an identifier to everything it is linked to.

The links form an undirected graph whose nodes are identifiers (subject type,
subject ID); a person or thing is a connected component of it. The walk below
is a breadth-first search that costs one statement per level, whatever the
size of the level, and stops at bounds so that one huge component (a shared
device, a bot's cookie) cannot make a request read the whole table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection

from assignments.models import SubjectType

DEFAULT_MAX_DEPTH = 10
DEFAULT_MAX_IDENTIFIERS = 1000

# (subject type pk, subject ID): the identifiers as the walk handles them.
Node = tuple[int, str]

# The neighbours of the frontier that are not yet visited, from both sides of
# the links (identifierlink_pair_unique serves side a, identifierlink_b_lookup
# side b). UNION ALL and LIMIT let the database stop after `limit` rows even at
# a node with a million links; a UNION would first collect and de-duplicate them all.
POSTGRES_NEIGHBOURS = """
WITH frontier AS (
    SELECT * FROM unnest(%s::bigint[], %s::text[]) AS f(type_id, subject_id)
), visited AS (
    SELECT * FROM unnest(%s::bigint[], %s::text[]) AS v(type_id, subject_id)
)
SELECT n.type_id, n.subject_id FROM (
    SELECT l.subject_type_b_id AS type_id, l.subject_id_b AS subject_id
    FROM frontier f
    JOIN idlinks_identifierlink l ON l.subject_type_a_id = f.type_id AND l.subject_id_a = f.subject_id
    UNION ALL
    SELECT l.subject_type_a_id, l.subject_id_a
    FROM frontier f
    JOIN idlinks_identifierlink l ON l.subject_type_b_id = f.type_id AND l.subject_id_b = f.subject_id
) n
WHERE NOT EXISTS (SELECT 1 FROM visited v WHERE v.type_id = n.type_id AND v.subject_id = n.subject_id)
LIMIT %s
"""

# SQLite builds a temporary index for a row-value NOT IN over a subquery; a
# correlated NOT EXISTS would rescan the visited list for every candidate row.
SQLITE_NEIGHBOURS = """
WITH frontier(type_id, subject_id) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(%s)
), visited(type_id, subject_id) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(%s)
)
SELECT n.type_id, n.subject_id FROM (
    SELECT l.subject_type_b_id AS type_id, l.subject_id_b AS subject_id
    FROM frontier f
    JOIN idlinks_identifierlink l ON l.subject_type_a_id = f.type_id AND l.subject_id_a = f.subject_id
    UNION ALL
    SELECT l.subject_type_a_id, l.subject_id_a
    FROM frontier f
    JOIN idlinks_identifierlink l ON l.subject_type_b_id = f.type_id AND l.subject_id_b = f.subject_id
) n
WHERE (n.type_id, n.subject_id) NOT IN (SELECT type_id, subject_id FROM visited)
LIMIT %s
"""


@dataclass(frozen=True)
class ConnectedIdentifier:
    subject_type: str
    subject_id: str
    # Links between it and the identifier the walk started from, by the shortest path.
    distance: int


@dataclass(frozen=True)
class ConnectedIdentifiers:
    """The identifiers linked, directly or through others, to one identifier.

    `identifiers` excludes the start and is ordered by distance, then subject
    type and subject ID. `truncated` is True when a bound stopped the walk while
    identifiers may have remained unvisited: the list is then a subset.
    """

    identifiers: tuple[ConnectedIdentifier, ...]
    truncated: bool


def _neighbours(frontier: Iterable[Node], visited: Iterable[Node], *, limit: int) -> list[Node]:
    """Up to `limit` rows naming identifiers linked to the frontier and not visited; one may repeat
    when it is linked to several frontier identifiers."""
    frontier = list(frontier)
    visited = list(visited)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                POSTGRES_NEIGHBOURS,
                [
                    [type_pk for type_pk, _ in frontier],
                    [subject_id for _, subject_id in frontier],
                    [type_pk for type_pk, _ in visited],
                    [subject_id for _, subject_id in visited],
                    limit,
                ],
            )
        else:
            cursor.execute(SQLITE_NEIGHBOURS, [json.dumps(frontier), json.dumps(visited), limit])
        return [(type_pk, subject_id) for type_pk, subject_id in cursor.fetchall()]


def identifiers_connected(
    *,
    subject_type: str,
    subject_id: str,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_identifiers: int = DEFAULT_MAX_IDENTIFIERS,
) -> ConnectedIdentifiers:
    """Every identifier connected to (subject_type, subject_id) by links, across subject types.

    The subject type is matched ignoring case; links through archived subject
    types are followed, since they still join recorded data. An unknown subject
    type or an identifier without links gives an empty result. The walk follows
    at most `max_depth` links from the start and returns at most
    `max_identifiers` identifiers; it costs one query for the subject types, one
    per level, and one more when it stops at `max_depth` with identifiers left to expand.
    """
    if max_depth < 1 or max_identifiers < 1:
        raise ValueError("max_depth and max_identifiers must be at least 1")
    type_keys = dict(SubjectType.objects.values_list("pk", "key"))
    start_type = next((pk for pk, key in type_keys.items() if key.lower() == subject_type.lower()), None)
    if start_type is None:
        return ConnectedIdentifiers(identifiers=(), truncated=False)

    start = (start_type, subject_id)
    visited: dict[Node, int] = {start: 0}
    frontier = [start]
    truncated = False
    for distance in range(1, max_depth + 1):
        room = max_identifiers - (len(visited) - 1)
        # Twice the room left: the rows may repeat an identifier, and reading a
        # little more keeps a dense but small component from looking truncated.
        limit = 2 * room + 1
        rows = _neighbours(frontier, visited, limit=limit)
        found = list(dict.fromkeys(rows))
        if len(found) > room or len(rows) == limit:
            truncated = True
            found = found[:room]
        visited.update((node, distance) for node in found)
        frontier = found
        if truncated or not frontier:
            break
    else:
        truncated = bool(_neighbours(frontier, visited, limit=1))

    connected = sorted(
        (
            ConnectedIdentifier(subject_type=type_keys[type_pk], subject_id=sid, distance=distance)
            for (type_pk, sid), distance in visited.items()
            if (type_pk, sid) != start
        ),
        key=lambda item: (item.distance, item.subject_type.lower(), item.subject_id),
    )
    return ConnectedIdentifiers(identifiers=tuple(connected), truncated=truncated)
