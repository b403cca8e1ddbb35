"""A paused queue's claim reads the queue's row, not its jobs (docs/adr/0017): it costs the
same beside 100 or 5,100 ready jobs, measured as tests/contract/test_claim_plan.py
measures a claim (SQLite's VM steps, PostgreSQL's blocks of the jobs table)."""

from __future__ import annotations

import alkstore
from tests.conftest import Backend
from tests.contract.test_claim_plan import PG_DEEPER, _claim_cost, _params


def test_a_paused_claim_reads_no_job(store: alkstore.Store, backend: Backend) -> None:
    q = store.queue("deep")
    q.enqueue_many(list(range(100)))
    q.enqueue_many(list(range(100)), priority=-1, delay=3600)  # a lower level too
    q.pause()
    small, claimed = _claim_cost(backend, _params())
    assert claimed == 0
    for _ in range(5):
        q.enqueue_many(list(range(1000)))
    big, claimed = _claim_cost(backend, _params())
    assert claimed == 0
    assert big <= small + (0 if backend.name == "sqlite" else PG_DEEPER), (small, big)
    q.resume()
    _, claimed = _claim_cost(backend, _params())
    assert claimed == 100
