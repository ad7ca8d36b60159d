"""Identifier links as export rows (export_id_links)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from core.exports import CHUNK_SIZE, time_ordered, timestamp_format
from idlinks.models import IdentifierLink
from idlinks.selectors import subject_type_keys
from idlinks.storage import links_distributed

ID_LINK_COLUMNS = ("subject_type_a", "subject_id_a", "subject_type_b", "subject_id_b", "created_at")


def id_link_rows(
    *, since: dt.datetime | None = None, chunk_size: int = CHUNK_SIZE
) -> Iterator[tuple[str, str, str, str, str]]:
    """Every link, oldest first, in (created_at, id) order, fetched chunk by chunk; call inside streaming_read().

    Ordered through the index identifierlink_created; id breaks the ties, so the
    order is the same on every run and an incremental export can resume from the
    last created_at it saw (--since is inclusive). A link is stored once, in
    canonical order (see IdentifierLink), so side a and side b are as stored.
    """
    rows = time_ordered(
        IdentifierLink.objects.all(),
        ("subject_type_a_id", "subject_id_a", "subject_type_b_id", "subject_id_b", "created_at"),
        since=since,
        chunk_size=chunk_size,
        paged=links_distributed(),
    )
    type_keys = subject_type_keys()
    for type_a, subject_a, type_b, subject_b, created_at in rows:
        if type_a not in type_keys or type_b not in type_keys:
            # Created by an apply after the map was read; subject types are never deleted (PROTECT).
            type_keys = subject_type_keys()
        yield type_keys[type_a], subject_a, type_keys[type_b], subject_b, timestamp_format(created_at)
