"""What passing N subject IDs to PostgreSQL costs, by the way they are sent.

`python -m bench.binding [--postgres-url URL]`: client CPU (psycopg adapting
the parameter, in this process) and server CPU (the backend parsing it, read
from /proc, so the server must be local) per execution, for a text[] array
parameter as assignments/storage.py sends, a bigint[] one as its INSERT adds,
and the same IDs as one JSON text. Django's cursor (psycopg ClientCursor,
statements not prepared) is used, as in the service.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import psycopg

from bench.cpu import process_cpu_seconds
from bench.database import postgres_url_argument

CASES = {
    "text[] parameter": ("SELECT count(*) FROM unnest(%s::text[])", lambda ids: [ids]),
    "bigint[] parameter": ("SELECT count(*) FROM unnest(%s::bigint[])", lambda ids: [list(range(len(ids)))]),
    "one JSON text": ("SELECT count(*) FROM json_array_elements_text(%s::json)", lambda ids: [json.dumps(ids)]),
}


def measure(url: str, *, size: int, executions: int) -> list[tuple[str, float, float]]:
    ids = [f"subject-{number:012d}" for number in range(size)]
    rows = []
    for name, (sql, params) in CASES.items():
        with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor, prepare_threshold=None) as c:
            (backend,) = c.execute("SELECT pg_backend_pid()").fetchone()
            cursor = c.cursor()
            for _ in range(20):
                cursor.execute(sql, params(ids))
            server_start = process_cpu_seconds([backend])[backend]
            client_start = time.process_time()
            for _ in range(executions):
                cursor.execute(sql, params(ids))
                cursor.fetchall()
            client = (time.process_time() - client_start) / executions
            server = (process_cpu_seconds([backend])[backend] - server_start) / executions
        rows.append((name, client * 1000, server * 1000))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/run binding", description=__doc__.splitlines()[0])
    postgres_url_argument(parser)
    parser.add_argument("--sizes", default="1,100,1000")
    parser.add_argument("--executions", type=int, default=500)
    args = parser.parse_args(argv)
    print(f"{'subjects':>8}  {'parameter':<20} {'client cpu ms':>13} {'server cpu ms':>13}")
    for size in (int(size) for size in args.sizes.split(",")):
        for name, client, server in measure(args.postgres_url, size=size, executions=args.executions):
            print(f"{size:>8}  {name:<20} {client:>13.3f} {server:>13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
