"""`status` lists writing transactions held open, not alkstore's own statements in flight
(docs/adr/0020): a claim, a relay batch or the sequencer is a writing transaction for the
length of one statement, and was listed with an age below zero."""

from __future__ import annotations

import threading
import time

import psycopg

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


def test_a_short_statement_in_flight_is_not_a_holdup(pg_backend: Backend) -> None:
    ns = pg_backend.namespace
    with pg_backend.migrated() as store, psycopg.connect(pg_backend.url, autocommit=True) as conn:
        pid = conn.info.backend_pid
        busy = threading.Thread(
            target=conn.execute,
            args=(
                f"WITH w AS (INSERT INTO {ns}.locks VALUES ('x', 'y', 1, 0) RETURNING 1) "
                "SELECT pg_sleep(0.8) FROM w",
            ),
        )
        busy.start()
        try:
            time.sleep(0.2)
            status = store.status()
            assert pid not in {h.pid for h in status.holdups}, status.holdups
            assert all(h.age >= 0 for h in status.holdups), status.holdups
        finally:
            busy.join()


def test_ages_are_never_negative_while_claims_run(pg_backend: Backend) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        q.enqueue_many([{"n": n} for n in range(200)])
        stop = threading.Event()

        def claim() -> None:
            with alkstore.connect(pg_backend.url, namespace=pg_backend.namespace) as other:
                while not stop.is_set():
                    for job in other.queue("q").claim_many(2, visibility=60):
                        job.ack()

        threads = [threading.Thread(target=claim) for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            with store.transaction() as tx:  # an open transaction of our own stays listed
                tx.append(OrderPlaced(order_id=1))
                tx.connection.execute("SELECT pg_sleep(0.05)")
            for _ in range(30):
                for holdup in store.status().holdups:
                    assert holdup.age >= 0, holdup
                    assert not holdup.query.startswith("WITH RECURSIVE levels"), holdup
        finally:
            stop.set()
            for thread in threads:
                thread.join()
