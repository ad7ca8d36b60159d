"""Reads of the link graph: what one identifier is connected to."""

from __future__ import annotations

from dataclasses import dataclass

from idlinks.models import IdentifierLink
from idlinks.storage import links_within
from idlinks.walk import MAX_DEPTH, Budget, neighbours_of, walk_from


@dataclass(frozen=True)
class ConnectedIdentifier:
    subject_type: str
    subject_id: str
    # Links between it and the identifier the walk started from, by the shortest path.
    distance: int


@dataclass(frozen=True)
class ConnectedIdentifiers:
    """The identifiers linked, directly or through others, to one identifier.

    `identifiers` excludes the start and is in the order of the walk of following links
    (idlinks/walk.py): distance, then subject type, then subject ID. `truncated` is
    True when a bound stopped the walk while identifiers may have remained unvisited: the
    list is then a subset.
    """

    identifiers: tuple[ConnectedIdentifier, ...]
    truncated: bool


def identifiers_connected(*, subject_type_pk: int, subject_id: str, depth: int = MAX_DEPTH) -> ConnectedIdentifiers:
    """Every identifier connected to (subject type, subject ID) by links, across subject types,
    within `depth` links (1 to MAX_DEPTH): the walk of following links, its bounds included.

    Links through archived subject types are followed, since they still join recorded data.
    The links are read one level past `depth`, so that `truncated` is exact at the depth bound
    and at MAX_IDENTIFIERS; it is also True when an identifier's links were read only up to
    FANOUT, and past MAX_LINK_ROWS the walk does not start: the result is empty and truncated.
    Costs one statement (on Citus one per level), and one more for the subject types when
    anything is linked.
    """
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be from 1 to {MAX_DEPTH}")
    start = (subject_type_pk, subject_id)
    graph = links_within(start=start, depth=depth + 1)
    if not graph.complete:
        return ConnectedIdentifiers(identifiers=(), truncated=True)
    neighbours = neighbours_of(graph.links)
    if start not in neighbours:
        return ConnectedIdentifiers(identifiers=(), truncated=False)
    walk = walk_from(start, neighbours, Budget(), depth=depth, exact=True, capped=graph.capped())
    if walk is None:
        return ConnectedIdentifiers(identifiers=(), truncated=True)
    keys = subject_type_keys()
    return ConnectedIdentifiers(
        identifiers=tuple(
            ConnectedIdentifier(subject_type=keys[type_pk], subject_id=linked_id, distance=distance)
            for (type_pk, linked_id), distance in zip(walk.order, walk.distances, strict=True)
        ),
        truncated=walk.truncated,
    )


def subject_type_keys() -> dict[int, str]:
    """Each subject type's ID (its key), by primary key: the model is the one the links' foreign key names,
    of which idlinks knows no more than this."""
    model = IdentifierLink._meta.get_field("subject_type_a").related_model
    return dict(model.objects.values_list("pk", "key"))
