"""The change feed on a Citus cluster: a transaction that wrote on several workers is committed on the
coordinator before it is on the workers, and a page waits for the workers (core.citus.workers_prepared_settled).
scripts/test-citus runs these; the end-to-end test of eight writers (tests/e2e/test_change_feed.py) runs there too,
its batches spanning shards on both workers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from assignments.data.changes import PREPARED_WAIT_SECONDS, changes_page
from tests.factories import ExperimentFactory
from tests.helpers.assignments import assignments_bulk_store
from tests.helpers.database import citus

pytestmark = [citus, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker() -> Iterator[psycopg.Connection]:
    """A connection to the test database on a worker node."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT nodename, nodeport FROM pg_dist_node WHERE groupid > 0 ORDER BY nodeport LIMIT 1")
        host, port = cursor.fetchone()
    settings = connection.settings_dict
    with psycopg.connect(host=host, port=port, dbname=settings["NAME"], user=settings["USER"], autocommit=True) as c:
        yield c


def prepare(worker: psycopg.Connection, name: str) -> None:
    """A transaction left prepared on the worker, as Citus leaves one between its two phases."""
    worker.execute("BEGIN")
    worker.execute("SELECT pg_current_xact_id()")
    worker.execute(f"PREPARE TRANSACTION '{name}'")


def test_a_page_waits_for_a_transaction_prepared_on_a_worker_then_serves(worker):
    assignments_bulk_store(ExperimentFactory(), 3, prefix="citus")
    prepare(worker, "feed-test-commit")
    threading.Timer(0.5, worker.execute, ["COMMIT PREPARED 'feed-test-commit'"]).start()

    started = time.monotonic()
    page = changes_page(after=None)

    assert time.monotonic() - started >= 0.4
    assert len(page.changes) == 3


def test_a_transaction_still_prepared_after_the_wait_holds_every_change_back(worker):
    assignments_bulk_store(ExperimentFactory(), 3, prefix="citus")
    start = changes_page(after=None, limit=1).changes[0].position
    prepare(worker, "feed-test-stuck")
    try:
        started = time.monotonic()
        page = changes_page(after=start)
        waited = time.monotonic() - started
    finally:
        worker.execute("ROLLBACK PREPARED 'feed-test-stuck'")

    assert page.changes == [] and page.next == start
    assert waited >= PREPARED_WAIT_SECONDS
    assert len(changes_page(after=start).changes) == 2
