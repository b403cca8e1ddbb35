"""A queue's default max_attempts is one constant, applied alike by every path that makes
a job (ADR 0006 addendum 2026-12-01): enqueue, enqueue with options or a dedupe key,
tx.enqueue, small and bulk enqueue_many, relay-made jobs; a requeued job keeps its own."""

from __future__ import annotations

from typing import Any

import pytest

import alkstore
from alkstore import _sql
from tests.conftest import Backend
from tests.events import OrderPlaced


def make_one_job_every_way(store: alkstore.Store, queue: str) -> int:
    """A job on `queue` by every path that makes one; returns how many were made."""
    q = store.queue(queue)
    q.enqueue("plain")
    q.enqueue("delayed", delay=0, priority=1)
    q.enqueue("keyed", dedupe_key="k1")
    with store.transaction() as tx:
        tx.enqueue(queue, "tx-plain")
        tx.enqueue(queue, "tx-keyed", dedupe_key="k2")
    q.enqueue_many(["few-1", "few-2"])
    bulk = store.engine.bulk_min
    q.enqueue_many([f"bulk-{i}" for i in range(bulk)])
    q.enqueue_many([alkstore.JobSpec(f"bulk-keyed-{i}", dedupe_key=f"b{i}") for i in range(bulk)])
    store.subscribe(queue, ["test.*"], start="now")
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
    assert store.relay_batch() == (1, 1)
    return 8 + 2 * bulk


def max_attempts_of_every_job(store: alkstore.Store, queue: str, made: int) -> dict[str, int]:
    jobs = store.queue(queue).claim_many(made + 1)
    assert len(jobs) == made
    return {str(job.raw): job.max_attempts for job in jobs}


@pytest.mark.parametrize("default", [_sql.DEFAULT_MAX_ATTEMPTS, 3])
def test_every_path_applies_the_one_default(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, default: int
) -> None:
    # The store loads its SQL when it connects: a changed constant reaches every query.
    monkeypatch.setattr(_sql, "DEFAULT_MAX_ATTEMPTS", default)
    with backend.migrated() as store:
        made = make_one_job_every_way(store, "defaults")
        got = max_attempts_of_every_job(store, "defaults", made)
        wrong = {raw: n for raw, n in got.items() if n != default}
        assert not wrong, f"jobs not given the default max_attempts={default}: {wrong}"


def test_the_default_is_the_queue_configs() -> None:
    assert alkstore.QueueConfig().max_attempts == _sql.DEFAULT_MAX_ATTEMPTS == 5


def test_every_path_applies_a_configured_default(store: alkstore.Store) -> None:
    store.queue("configured").configure(max_attempts=2)
    made = make_one_job_every_way(store, "configured")
    got = max_attempts_of_every_job(store, "configured", made)
    assert set(got.values()) == {2}, got


def test_a_requeued_job_keeps_its_max_attempts(store: alkstore.Store) -> None:
    q = store.queue("requeued")
    q.enqueue("default")
    q.enqueue("own", max_attempts=7)
    for job in q.claim_many(2):
        job.fail("bad")
    store.queue("requeued").configure(max_attempts=2)  # a later change of the default
    assert q.requeue() == 2
    got: dict[Any, int] = {job.payload: job.max_attempts for job in q.claim_many(3)}
    assert got == {"default": _sql.DEFAULT_MAX_ATTEMPTS, "own": 7}
