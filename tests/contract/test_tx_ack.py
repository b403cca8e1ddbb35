"""Transactional ack (ADR 0022): `job.transaction()` commits the handler's writes, its
follow-up work and the job's ack together, fenced by the claim's lease token; on both
engines, through the plain Queue API and the worker runtime."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import alkstore
import relay
from tests.business import Business
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cstore(backend: Backend, clock: Clock) -> Any:
    with backend.migrated(clock=clock) as store:
        yield store


def test_writes_follow_ups_and_the_ack_commit_together(cstore: alkstore.Store) -> None:
    business = Business(cstore)
    q = cstore.queue("orders")
    job_id = q.enqueue({"order": 1})
    job = q.claim()
    assert job is not None and job.id == job_id
    with job.transaction() as tx:
        business.write(tx, job.id)
        follow = tx.enqueue("emails", {"order": 1})
        tx.append(OrderPlaced(order_id=1, total_cents=5), key="order-1")
    assert job.acked
    assert business.rows() == {job_id: "done"}
    assert cstore.job(job_id) is None, "acked: the job is gone"
    assert cstore.queue("emails").get(follow) is not None
    assert [e.type for e in cstore.log.read()] == ["test.order_placed"]
    with pytest.raises(alkstore.LeaseLost):
        job.ack()  # acked once
    with pytest.raises(alkstore.LeaseLost):
        job.transaction()  # and never twice


def test_an_error_in_the_block_rolls_back_and_the_job_stays_held(cstore: alkstore.Store) -> None:
    business = Business(cstore)
    q = cstore.queue("orders")
    q.enqueue({"order": 2})
    job = q.claim()
    assert job is not None
    with pytest.raises(ValueError, match="boom"), job.transaction() as tx:
        business.write(tx, job.id)
        tx.enqueue("emails", {"order": 2})
        raise ValueError("boom")
    assert not job.acked
    assert business.rows() == {}
    assert cstore.queue("emails").info().ready == 0
    info = cstore.job(job.id)
    assert isinstance(info, alkstore.JobInfo) and info.state == "running"
    with job.transaction() as tx:  # the holder can still finish it
        business.write(tx, job.id, "second try")
    assert business.rows() == {job.id: "second try"}


def test_a_holder_whose_lease_was_taken_commits_nothing(
    cstore: alkstore.Store, clock: Clock
) -> None:
    business = Business(cstore)
    q = cstore.queue("orders")
    q.enqueue({"order": 3})
    stale = q.claim(visibility=1)
    assert stale is not None
    clock.ms += 1_500  # the lease lapses ...
    fresh = q.claim(visibility=30)  # ... and another worker takes the job
    assert fresh is not None and fresh.id == stale.id
    with pytest.raises(alkstore.LeaseLost) as lost, stale.transaction() as tx:
        business.write(tx, stale.id, "stale")
        tx.enqueue("emails", {"order": 3})
    assert lost.value.operation == "ack" and stale.lease_lost and not stale.acked
    assert business.rows() == {}
    assert cstore.queue("emails").info().ready == 0, "the follow-up rolled back too"
    with fresh.transaction() as tx:
        business.write(tx, fresh.id, "fresh")
    assert business.rows() == {fresh.id: "fresh"}


def test_a_lapsed_lease_nobody_took_still_commits(cstore: alkstore.Store, clock: Clock) -> None:
    """ADR 0012: a lease is lost only to a new claim."""
    business = Business(cstore)
    q = cstore.queue("orders")
    q.enqueue({"order": 4})
    job = q.claim(visibility=1)
    assert job is not None
    clock.ms += 5_000
    with job.transaction() as tx:
        business.write(tx, job.id)
    assert job.acked and cstore.job(job.id) is None and business.rows() == {job.id: "done"}


def test_a_cancelled_job_commits_nothing(cstore: alkstore.Store) -> None:
    business = Business(cstore)
    q = cstore.queue("orders")
    q.enqueue({"order": 5})
    job = q.claim()
    assert job is not None
    q.cancel(job.id, force=True)
    with pytest.raises(alkstore.LeaseLost), job.transaction() as tx:
        business.write(tx, job.id)
    assert business.rows() == {}


def test_the_worker_counts_a_transactional_ack_once(backend: Backend) -> None:
    with backend.migrated() as store:
        business = Business(store)
        q = store.queue("orders")
        ids = q.enqueue_many([{"order": n} for n in range(40)])
        worker = relay.Worker(store, concurrency=4)
        outcomes: list[str] = []
        lock = threading.Lock()

        def seen(job: alkstore.Job[Any], kind: str, seconds: float) -> None:
            with lock:
                outcomes.append(kind)

        worker.on_outcome = seen

        @worker.handler("orders", concurrency=4)
        def handle(job: alkstore.Job[dict[str, int]]) -> None:
            with job.transaction() as tx:
                business.write(tx, job.id, str(job.payload["order"]))
                if job.payload["order"] % 10 == 0:
                    tx.enqueue("emails", {"order": job.payload["order"]})

        worker.run(once=True)
        assert set(business.rows()) == set(ids)
        assert q.info().ready == 0 and q.info().running == 0
        assert store.queue("emails").info().ready == 4
        assert worker.counters["ack"] == 40
        assert worker.counters["lease_lost"] == 0 and worker.counters["retry"] == 0
        assert sorted(outcomes) == ["ack"] * 40


def test_the_worker_retries_a_handler_whose_block_failed(backend: Backend) -> None:
    with backend.migrated() as store:
        business = Business(store)
        q = store.queue("orders")
        q.configure(backoff=alkstore.Fixed(0))
        job_id = q.enqueue({"order": 7})
        worker = relay.Worker(store, concurrency=1)
        calls: list[int] = []

        @worker.handler("orders")
        def handle(job: alkstore.Job[Any]) -> None:
            calls.append(job.attempt)
            with job.transaction() as tx:
                business.write(tx, job.id, f"attempt {job.attempt}")
                if job.attempt == 1:
                    raise RuntimeError("downstream said no")

        worker.run(once=True)
        while store.job(job_id) is not None:
            worker.run(once=True)
        assert calls == [1, 2]
        assert business.rows() == {job_id: "attempt 2"}, "the first attempt left nothing"
