"""Replacing a PostgreSQL table's primary key without blocking its writers, for migrations."""

from __future__ import annotations


def primary_key_replace(table: str, columns: str) -> list[str]:
    """Statements that make `columns` the primary key of `table`; run outside a transaction.

    The new key's index is built CONCURRENTLY: on a table of billions of rows that
    takes long and must not block the rows written meanwhile. Only the swap of
    the constraints takes a lock, for an instant. An invalid index left by an
    interrupted build is dropped first, so running the statements again is safe.
    """
    index = f"{table}_pkey_new"
    return [
        f"""DO $$ BEGIN
            IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('{index}') AND NOT indisvalid) THEN
                DROP INDEX {index};
            END IF;
        END $$""",
        f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} ({columns})",
        f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
        f"ADD CONSTRAINT {table}_pkey PRIMARY KEY USING INDEX {index}",
    ]
