"""Lease renewal is not starved by handlers that use the database (issue 12, ADR 0012).

PostgreSQL: more handlers than pooled connections, each holding a store
transaction for most of the visibility; renewal must not queue behind them for a
connection. SQLite: handlers that take the write lock one after another for most
of the visibility; renewal must not queue behind them for the lock. Either way
every job's handler must start exactly once and every job be acked.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

import alkstore
import relay
from tests.conftest import Backend
from tests.worker_support import running, wait_until

pytestmark = pytest.mark.slow

# engine: (jobs, handler concurrency, pool size, seconds a handler holds the database,
#          visibility)
SETUPS = {
    "postgres": (16, 12, 4, 1.5, 2.5),
    "sqlite": (12, 4, 10, 0.8, 2.0),
}


def test_handlers_holding_the_database_never_make_a_job_run_twice(backend: Backend) -> None:
    jobs, concurrency, pool, hold, visibility = SETUPS[backend.name]
    with backend.migrated(pool_size=pool) as store:
        q = store.queue("busy")
        q.configure(max_attempts=10)
        ids = q.enqueue_many(range(jobs))
        starts: Counter[int] = Counter()
        inside = Counter[int]()
        twice_at_once: list[int] = []
        lock = threading.Lock()
        worker = relay.Worker(store, poll=0.1, visibility=visibility, grace=60)

        @worker.handler("busy", concurrency=concurrency)
        def handle(job: alkstore.Job[Any]) -> None:
            with lock:
                starts[job.id] += 1
                inside[job.id] += 1
                if inside[job.id] > 1:
                    twice_at_once.append(job.id)
            try:
                with store.transaction() as tx:  # the write lock / a pooled connection
                    tx.enqueue("side", {"job": job.id})
                    time.sleep(hold)
            finally:
                with lock:
                    inside[job.id] -= 1

        with running(worker):
            wait_until(
                lambda: (
                    worker.counters["ack"] + worker.counters["lease_lost"] >= jobs
                    and not q.stats().active
                    and not q.stats().ready
                ),
                "every job handled",
                timeout=120,
            )
        ran_twice = {job_id: n for job_id, n in starts.items() if n != 1}
        assert not twice_at_once, f"jobs ran twice at once: {twice_at_once}"
        assert not ran_twice, f"handlers started more than once: {ran_twice} ({worker.counters})"
        assert sorted(starts) == sorted(i for i in ids if i is not None)
        assert worker.counters["ack"] == jobs and worker.counters["lease_lost"] == 0
        assert q.dead_letters() == []
        assert store.queue("side").stats().ready == jobs
