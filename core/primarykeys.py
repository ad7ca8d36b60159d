"""Replacing a PostgreSQL table's primary key without blocking its writers, for migrations."""

from __future__ import annotations


def invalid_index_drop(name: str) -> str:
    """A statement that drops the index `name` if an interrupted CONCURRENTLY build left it invalid, so that
    building it again is safe."""
    return f"""DO $$ BEGIN
            IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('{name}') AND NOT indisvalid) THEN
                DROP INDEX {name};
            END IF;
        END $$"""


def primary_key_replace(table: str, columns: str) -> list[str]:
    """Statements that make `columns` the primary key of `table`; run outside a transaction.

    The new key's index is built CONCURRENTLY: on a table of billions of rows that
    takes long and must not block the rows written meanwhile. Only the swap of
    the constraints takes a lock, for an instant. An invalid index left by an
    interrupted build is dropped first, so running the statements again is safe.
    """
    index = f"{table}_pkey_new"
    return [
        invalid_index_drop(index),
        f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} ({columns})",
        f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
        f"ADD CONSTRAINT {table}_pkey PRIMARY KEY USING INDEX {index}",
    ]
