"""Leases under real use (issue 12, ADR 0012), on both engines, in-process.

Attempts count when a handler starts, not when a prefetched job is claimed;
in-flight work is tracked by (job id, lease token); every way a handler can end
frees its slot and settles its job; rows that cannot be decoded never stop a
claim loop; a worker whose own thread fails stops with WorkerCrashed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import alkstore
import relay
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.worker_support import POLL, drain, empty, running, wait_until


def execute(backend: Backend, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Raw SQL on the jobs table (`{jobs}`), `?` placeholders, as a hand-written producer
    or an operator would write it."""
    conn = backend.raw_connection()
    try:
        if backend.name == "postgres":
            with conn:
                cursor = conn.execute(
                    sql.format(jobs=f"{backend.namespace}.jobs").replace("?", "%s"), params
                )
                return cursor.fetchall() if cursor.description else []
        return list(conn.execute(sql.format(jobs=f"{backend.namespace}__jobs"), params))
    finally:
        conn.close()


# -- attempts count when a handler starts ---------------------------------------------------


def test_prefetched_jobs_count_no_attempt_until_started(store: alkstore.Store) -> None:
    q = store.queue("pre")
    q.enqueue_many([1, 2, 3])
    jobs = q.claim_many(3, visibility=30, start=1)
    assert [(j.started, j.attempt) for j in jobs] == [(True, 1), (False, 0), (False, 0)]
    first, second, third = jobs
    second.mark_started()
    assert (second.started, second.attempt) == (True, 1)
    q.start_many([second])
    third.release()  # never started: nothing to give back
    first.release()  # started: its attempt does not count either (ADR 0008)
    back = {j.id: j.attempt for j in q.claim_many(3, visibility=30)}
    assert back == {first.id: 1, third.id: 1}, "released jobs start again as attempt 1"
    second.ack()


def test_a_prefetched_job_whose_lease_ran_out_burns_no_attempt(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        q = store.queue("pre")
        q.configure(max_attempts=1)
        job_id = q.enqueue("x")
        (held,) = q.claim_many(1, visibility=5, start=0)
        assert not held.started
        clock.advance(6)  # the holder died with the job prefetched
        (again,) = q.claim_many(1, visibility=5)
        assert (again.id, again.attempt) == (job_id, 1), "the one attempt is still there"
        assert store.sweep().lease_expired == 0
        again.ack()
        assert q.dead_letters() == []


def test_a_started_job_whose_lease_ran_out_counts_and_says_so(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        q = store.queue("pre")
        q.configure(max_attempts=2)
        q.enqueue("x")
        first = q.claim(visibility=5)
        assert first is not None
        clock.advance(6)
        second = q.claim(visibility=5)
        assert second is not None and second.attempt == 2
        clock.advance(6)
        assert q.claim(visibility=5) is None, "exhausted: never handed out again"
        assert store.sweep().lease_expired == 1
        (dead,) = q.dead_letters()
        assert dead.reason == "lease expired"
        assert [(a.attempt, a.error) for a in dead.history] == [
            (1, "lease expired"),
            (2, "lease expired"),
        ]


# -- exhausted jobs, heartbeats after the lease ran out, lease lengths ------------------------


def test_an_exhausted_job_without_a_lease_is_buried_not_stranded(
    store: alkstore.Store, backend: Backend
) -> None:
    q = store.queue("ex")
    job_id = q.enqueue("x", max_attempts=2)
    execute(backend, "UPDATE {jobs} SET attempts = 2 WHERE id = ?", job_id)
    assert store.sweep().lease_expired == 1
    assert q.claim() is None
    (dead,) = q.dead_letters()
    assert (dead.id, dead.reason, dead.attempts) == (job_id, "attempts exhausted", 2)
    assert q.stats().active == 0


def test_claims_alone_bury_exhausted_jobs_without_any_sweep(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        q = store.queue("ex")
        q.enqueue("x", max_attempts=1)
        assert q.claim(visibility=1) is not None  # its holder dies
        clock.advance(2)
        deadline = time.monotonic() + 10
        while not q.dead_letters():  # an application that only ever calls claim()
            assert time.monotonic() < deadline, "claims never buried the exhausted job"
            assert q.claim(visibility=1) is None
            time.sleep(0.1)
        assert q.dead_letters()[0].reason == "lease expired"


def test_a_heartbeat_after_the_lease_ran_out_renews_it_until_someone_claims_it(
    backend: Backend,
) -> None:
    """ADR 0012: only a claim by someone else takes a job from its holder; a lapsed lease
    that nobody claimed is renewed by a late heartbeat (at-least-once either way)."""
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        q = store.queue("hb")
        q.enqueue("x")
        job = q.claim(visibility=5)
        assert job is not None
        clock.advance(6)
        job.heartbeat()  # nobody took it: renewed for 5 s from now
        clock.advance(4)
        assert q.claim(visibility=5) is None, "the renewed lease holds"
        clock.advance(2)
        thief = q.claim(visibility=5)
        assert thief is not None
        with pytest.raises(alkstore.LeaseLost):
            job.heartbeat()
        assert job.lease_lost
        with pytest.raises(alkstore.LeaseLost):
            job.ack()
        thief.ack()


@pytest.mark.parametrize("ttl", [0.0004, 0, -1])
def test_a_named_lease_shorter_than_a_millisecond_is_refused(
    store: alkstore.Store, ttl: float
) -> None:
    with pytest.raises(alkstore.InvalidArgument):
        store.lease("leader", ttl=ttl)


def test_store_time_is_the_databases(backend: Backend) -> None:
    with backend.migrated() as store:
        assert store.clock is None
        assert abs(store.now() - time.time()) < 5  # the same host here
        job_id = store.queue("t").enqueue("x", delay=60)
        stats = store.queue("t").stats()
        assert (stats.ready, stats.scheduled) == (0, 1), job_id


# -- every way a handler ends settles its job -----------------------------------------------


def test_a_negative_retry_delay_uses_the_backoff_and_the_worker_goes_on(
    store: alkstore.Store,
) -> None:
    q = store.queue("neg")
    q.configure(max_attempts=2, backoff=alkstore.Fixed(0))
    q.enqueue("x")
    worker = relay.Worker(store, poll=POLL)
    runs: list[int] = []

    @worker.handler("neg", concurrency=1)
    def handle(job: alkstore.Job[Any]) -> None:
        runs.append(job.attempt)
        raise relay.Retry(delay=-1)

    drain(worker)  # returns: the handler thread lived on
    assert runs == [1, 2]
    (dead,) = q.dead_letters()
    assert "Retry delay -1 is not >= 0" in dead.history[0].error
    assert worker.counters["retry"] == 2 and worker.counters["dead"] == 1  # the last too


@pytest.mark.parametrize("ending", [KeyboardInterrupt, SystemExit, asyncio.CancelledError])
def test_base_exceptions_in_sync_handlers_settle_the_job(
    store: alkstore.Store, ending: type[BaseException]
) -> None:
    q = store.queue("base")
    q.configure(max_attempts=2, backoff=alkstore.Fixed(0))
    q.enqueue("x")
    worker = relay.Worker(store, poll=POLL)

    @worker.handler("base", concurrency=1)
    def handle(job: alkstore.Job[Any]) -> None:
        raise ending()

    drain(worker)
    (dead,) = q.dead_letters()
    assert [a.error.split(":")[0] for a in dead.history] == [ending.__name__] * 2
    assert q.stats().active == 0


def test_a_cancelled_async_handler_frees_its_slot_and_its_attempt_counts(
    store: alkstore.Store,
) -> None:
    q = store.queue("cancel")
    q.configure(max_attempts=3, backoff=alkstore.Fixed(0))
    q.enqueue_many(range(6))
    worker = relay.Worker(store, poll=POLL)
    done: list[int] = []

    @worker.handler("cancel", concurrency=1)
    async def handle(job: alkstore.Job[int]) -> None:
        if job.payload % 2 == 0:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # what a library deep in the handler might do
            await asyncio.sleep(10)
        done.append(job.payload)

    drain(worker)
    assert sorted(done) == [1, 3, 5], "a concurrency-1 queue kept going"
    dead = q.dead_letters()
    assert len(dead) == 3
    for letter in dead:
        assert letter.attempts == 3, "every cancelled attempt counted"
        assert letter.history[0].error.startswith("CancelledError")
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 3, None)


# -- in-flight work is tracked by (job id, lease token) ------------------------------------


def test_the_same_worker_reclaiming_a_lapsed_job_keeps_both_claims_apart(
    store: alkstore.Store,
) -> None:
    q = store.queue("twice")
    q.configure(max_attempts=3)
    job_id = q.enqueue("x")
    worker = relay.Worker(store, poll=0.05, renew=False, visibility=0.5)
    runs: list[tuple[int, int]] = []
    first_may_end = threading.Event()

    @worker.handler("twice", concurrency=2)
    def handle(job: alkstore.Job[Any]) -> None:
        runs.append((job.id, job.attempt))
        if job.attempt == 1:
            first_may_end.wait(20)  # outlives its lease; the same worker claims it again

    with running(worker):
        wait_until(lambda: len(runs) == 2, "the second claim of the lapsed job")
        wait_until(lambda: worker.counters["ack"] == 1, "the second run's ack")
        first_may_end.set()
        wait_until(lambda: worker.counters["lease_lost"] == 1, "the first run's ack refused")
    assert runs == [(job_id, 1), (job_id, 2)]
    assert q.dead_letters() == [], "a job that succeeded is never dead-lettered"
    assert empty(q)


# -- rows that cannot be decoded ------------------------------------------------------------


def test_rows_that_cannot_be_decoded_are_dead_lettered_and_the_queue_goes_on(
    store: alkstore.Store, backend: Backend
) -> None:
    q = store.queue("raw")
    bad_headers = q.enqueue(OrderPlaced(order_id=1))
    execute(backend, "UPDATE {jobs} SET headers = ? WHERE id = ?", '{"n": 1}', bad_headers)
    bad_type = q.enqueue(OrderPlaced(order_id=2))
    execute(backend, "UPDATE {jobs} SET type = ? WHERE id = ?", "test.nobody", bad_type)
    bad_payload = q.enqueue(OrderPlaced(order_id=3))
    execute(backend, "UPDATE {jobs} SET payload = ? WHERE id = ?", '{"order_id": "x"}', bad_payload)
    good = q.enqueue(OrderPlaced(order_id=4))
    worker = relay.Worker(store, poll=POLL, unknown_type_grace=0)
    seen: list[int] = []

    @worker.handler("raw", concurrency=1)
    def handle(job: alkstore.Job[OrderPlaced]) -> None:
        seen.append(job.id)

    drain(worker)
    assert seen == [good]
    dead = {d.id: d for d in q.dead_letters()}
    assert sorted(dead) == sorted([bad_headers, bad_type, bad_payload])
    assert "headers are not a JSON object of strings" in dead[bad_headers].reason
    assert dead[bad_headers].headers == {} and dead[bad_headers].raw_headers
    assert "unknown event type 'test.nobody'" in dead[bad_type].reason
    assert "Expected `int`, got `str`" in dead[bad_payload].reason
    assert all(d.raw for d in dead.values()), "the raw payload is kept"
    assert empty_but_dead(q)


def empty_but_dead(q: alkstore.Queue) -> bool:
    stats = q.stats()
    return (stats.ready, stats.scheduled, stats.active) == (0, 0, 0)


def test_an_unknown_event_type_waits_out_a_grace_before_the_dead_letters(
    backend: Backend,
) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        q = store.queue("deploy")
        job_id = q.enqueue(OrderPlaced(order_id=1))
        execute(backend, "UPDATE {jobs} SET type = ? WHERE id = ?", "test.newer", job_id)
        worker = relay.Worker(store, poll=POLL, unknown_type_grace=60)

        @worker.handler("deploy", concurrency=1)
        def handle(job: alkstore.Job[Any]) -> None:
            raise AssertionError("never decodes")

        drain(worker)
        assert q.dead_letters() == [] and q.stats().scheduled == 1, "released, not buried"
        assert worker.counters["unknown_type"] == 1
        (row,) = execute(backend, "SELECT attempts FROM {jobs} WHERE id = ?", job_id)
        assert row[0] == 0, "waiting for a newer worker burns no attempt"
        clock.advance(61)
        drain(worker)
        (dead,) = q.dead_letters()
        assert "unknown event type 'test.newer'" in dead.reason and "still after 60s" in dead.reason


# -- the worker's own threads ---------------------------------------------------------------


def test_a_failing_internal_thread_stops_the_worker_with_worker_crashed(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: alkstore.Queue, jobs: Any) -> list[int]:
        raise RuntimeError("a bug in the ack path")

    monkeypatch.setattr(alkstore.Queue, "ack_many", broken)
    store.queue("crash").enqueue("x")
    worker = relay.Worker(store, poll=POLL, grace=1)

    @worker.handler("crash")
    def handle(job: alkstore.Job[Any]) -> None:
        pass

    with pytest.raises(relay.WorkerCrashed, match="a bug in the ack path"):
        worker.run()


def test_a_prefetch_no_larger_than_the_concurrency_never_claims_zero_jobs(
    store: alkstore.Store,
) -> None:
    """batch <= concurrency makes the prefetch the concurrency: with the prefetch full,
    the next claim would ask for 0 jobs (InvalidArgument) and stop the worker."""
    q = store.queue("tight")
    q.enqueue_many(range(6))
    worker = relay.Worker(store, poll=POLL, batch=1)
    done: list[int] = []

    @worker.handler("tight", concurrency=1)
    def handle(job: alkstore.Job[int]) -> None:
        time.sleep(0.05)
        done.append(job.payload)

    drain(worker)
    assert sorted(done) == list(range(6))
