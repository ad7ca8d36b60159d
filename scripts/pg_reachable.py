"""Exit 0 if the PostgreSQL server of the URL given answers a query within 5 seconds."""

import sys

import psycopg

try:
    with psycopg.connect(sys.argv[1], connect_timeout=5) as connection:
        connection.execute("SELECT 1")
except psycopg.Error:
    sys.exit(1)
