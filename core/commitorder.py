"""The order in which stored changes were committed, for the change feed (docs/explanation/change-feed.md).

Each row the feed follows carries the ID of the transaction that wrote it. On
PostgreSQL that is pg_current_xact_id(), a 64-bit number given out in the order
transactions first write: not their commit order, but every ID below the
oldest transaction of the database still running (POSTGRES_HORIZON) belongs to
a transaction that has ended, so no row with such an ID can still appear. On
SQLite, where one transaction writes at a time, a counter that each written row
advances (triggers of the assignments app's migrations) is the commit order
itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import models

from core.primarykeys import invalid_index_drop

# The writing transaction's ID as a bigint: xid8 has no cast to bigint but through its text.
POSTGRES_TRANSACTION_ID = "(pg_current_xact_id()::text::bigint)"
# The horizon: every transaction of this database with a smaller ID has ended. That is the smallest ID among
# the transactions of this database still running or prepared, or, with none, the first ID not yet given out.
# The IDs are taken from the snapshot first, so a transaction given its ID after it is above the horizon
# whether listed or not. Only this database's: pg_snapshot_xmin would also wait for a transaction left open
# in another database of the server. pg_stat_activity shows 32-bit IDs; each is widened to the 64-bit ID
# just below the snapshot's xmax with the same low 32 bits.
POSTGRES_HORIZON = """
SELECT least(s.xmax, min(s.xmax - ((s.xmax % 4294967296 - x.xid + 4294967296) % 4294967296)))
FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax) AS s
LEFT JOIN (
    SELECT backend_xid::text::bigint FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xid IS NOT NULL
    UNION ALL
    SELECT transaction::text::bigint FROM pg_prepared_xacts WHERE database = current_database()
) AS x(xid) ON true
GROUP BY s.xmax
"""


# The rank of a position after every change of its transaction.
RANK_END = 9
_CURSOR = re.compile(r"c1\.([0-9a-f]{1,16})\.([0-9])\.([0-9a-f]{1,16})")


@dataclass(frozen=True, order=True)
class Position:
    """A place in the change feed: (transaction ID, rank, row ID) orders every change, where the rank tells
    apart the kinds of change one transaction made and the row ID the rows. A cursor names the change at
    its position, and reading after it goes on from the next."""

    xid: int
    rank: int
    row: int

    def cursor(self) -> str:
        return f"c1.{self.xid:x}.{self.rank}.{self.row:x}"

    @classmethod
    def parse(cls, text: str) -> Position | None:
        """The position a cursor names, or None if it is not one this service writes."""
        found = _CURSOR.fullmatch(text)
        if found is None:
            return None
        xid, rank, row = (int(part, 16) for part in found.groups())
        # Both are bigint columns.
        if max(xid, row) >= 2**63:
            return None
        return cls(xid, rank, row)

    @classmethod
    def before(cls, horizon: int) -> Position:
        """The position after every change of the transactions below `horizon`."""
        return cls(max(horizon - 1, 0), RANK_END, 0)


def after_filter(*, rank: int, position: Position, xid_column: str, row_column: str) -> tuple[str, list]:
    """SQL and parameters selecting the changes after `position` of a table whose changes all have `rank`,
    its rows keyed by (xid_column, row_column): a filter its index on those columns answers."""
    if rank > position.rank:
        return f"{xid_column} >= %s", [position.xid]
    if rank < position.rank:
        return f"{xid_column} > %s", [position.xid]
    return f"({xid_column}, {row_column}) > (%s, %s)", [position.xid, position.row]


class TransactionOrder(models.Func):
    """A column's database default: the writing transaction's ID on PostgreSQL; on SQLite NULL, which the
    insert triggers replace with the next value of the change counter."""

    template = POSTGRES_TRANSACTION_ID
    arity = 0
    output_field = models.BigIntegerField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return "NULL", []


def index_build(*, table: str, name: str, columns: str, where: str) -> list[str]:
    """Statements that build a partial index on a PostgreSQL table without blocking its writers; run outside a
    transaction. An invalid index left by an interrupted build is dropped first, so running them again is safe."""
    return [
        invalid_index_drop(name),
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} ({columns}) WHERE {where}",
    ]


def change_columns_add(*, vendor: str, table: str, index: str) -> list[str]:
    """Statements that give an existing table the change feed's columns, change_xid and recorded_at, and their
    partial index on (change_xid, id); on PostgreSQL run outside a transaction.

    On PostgreSQL the columns are added without a default, which writes nothing to
    the rows already there, and then given their defaults, which only new rows
    take: a volatile default given with the column would rewrite a table of
    billions of rows, and date all of them with the migration's transaction. The
    rows already there keep NULL and stay out of the feed. SQLite takes no
    volatile default: the assignments app's triggers fill both columns.
    """
    if vendor != "postgresql":
        return [
            f"ALTER TABLE {table} ADD COLUMN change_xid bigint NULL",
            f"ALTER TABLE {table} ADD COLUMN recorded_at datetime NULL",
            f"CREATE INDEX {index} ON {table} (change_xid, id) WHERE change_xid IS NOT NULL",
        ]
    return [
        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS change_xid bigint NULL, "
        "ADD COLUMN IF NOT EXISTS recorded_at timestamptz NULL",
        f"ALTER TABLE {table} ALTER COLUMN change_xid SET DEFAULT {POSTGRES_TRANSACTION_ID}, "
        "ALTER COLUMN recorded_at SET DEFAULT statement_timestamp()",
        *index_build(table=table, name=index, columns="change_xid, id", where="change_xid IS NOT NULL"),
    ]


def change_columns_drop(*, table: str, index: str) -> list[str]:
    return [
        f"DROP INDEX IF EXISTS {index}",
        f"ALTER TABLE {table} DROP COLUMN change_xid",
        f"ALTER TABLE {table} DROP COLUMN recorded_at",
    ]
