"""Debounce / replace (ADR 0022): `on_duplicate="replace"` with a dedupe key puts the newer
job in the place of a waiting one (with `delay=window`: a debounce), on every producing
path of the Queue API: `enqueue`, `tx.enqueue`, `enqueue_many` (small and bulk batches);
and through the worker runtime, which runs the newest payload once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import alkstore
import relay
from tests.clock import Clock
from tests.conftest import Backend


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cstore(backend: Backend, clock: Clock) -> Any:
    with backend.migrated(clock=clock) as store:
        yield store


def _live(q: alkstore.Queue) -> list[tuple[int, Any, str | None]]:
    return [(j.id, j.raw_payload, j.dedupe_key) for j in q.jobs()]


def test_enqueue_within_the_window_replaces_the_waiting_job(
    cstore: alkstore.Store, clock: Clock
) -> None:
    q = cstore.queue("debounce")
    first = q.enqueue({"v": 1}, dedupe_key="doc-9", delay=10, on_duplicate="replace")
    for v in (2, 3):
        clock.ms += 4_000
        assert q.enqueue({"v": v}, dedupe_key="doc-9", delay=10, on_duplicate="replace") == first
    assert _live(q) == [(first, {"v": 3}, "doc-9")]
    info = q.get(first)
    assert isinstance(info, alkstore.JobInfo)
    assert info.visible_at.timestamp() == pytest.approx(clock() + 10, abs=0.002)
    clock.ms += 9_000
    assert q.claim() is None, "the window was pushed back by the last enqueue"
    clock.ms += 1_000
    job = q.claim()
    assert job is not None and job.id == first and job.raw_payload == {"v": 3}


def test_a_replaced_job_starts_over(cstore: alkstore.Store) -> None:
    q = cstore.queue("debounce")
    job_id = q.enqueue({"v": 1}, dedupe_key="k", priority=1, max_attempts=3)
    job = q.claim()
    assert job is not None
    job.retry(delay=60, error="boom")
    q.enqueue({"v": 2}, dedupe_key="k", priority=5, on_duplicate="replace")
    info = q.get(job_id)
    assert isinstance(info, alkstore.JobInfo)
    assert (info.attempts, info.history, info.priority, info.state) == (0, [], 5, "ready")
    assert info.max_attempts == 5, "the new job's options: here the queue's default"


def test_a_running_job_keeps_running_and_the_new_one_waits_beside_it(
    cstore: alkstore.Store,
) -> None:
    q = cstore.queue("debounce")
    old = q.enqueue({"v": 1}, dedupe_key="k")
    running = q.claim()
    assert running is not None and running.id == old
    new = q.enqueue({"v": 2}, dedupe_key="k", on_duplicate="replace")
    assert new != old
    assert _live(q) == [(old, {"v": 1}, None), (new, {"v": 2}, "k")]
    running.ack()  # its holder finishes as usual
    q.cancel(dedupe_key="k")  # the key names the new job
    assert _live(q) == []


def test_tx_enqueue_replaces_only_if_the_transaction_commits(cstore: alkstore.Store) -> None:
    q = cstore.queue("debounce")
    job_id = q.enqueue({"v": 1}, dedupe_key="k", delay=5)
    with pytest.raises(RuntimeError), cstore.transaction() as tx:
        tx.enqueue("debounce", {"v": 2}, dedupe_key="k", delay=5, on_duplicate="replace")
        raise RuntimeError("rolled back")
    assert _live(q) == [(job_id, {"v": 1}, "k")]
    with cstore.transaction() as tx:
        assert tx.enqueue("debounce", {"v": 3}, dedupe_key="k", on_duplicate="replace") == job_id
    assert _live(q) == [(job_id, {"v": 3}, "k")]


@pytest.mark.parametrize("size", [3, 300])
def test_enqueue_many_replaces_in_input_order(cstore: alkstore.Store, size: int) -> None:
    q = cstore.queue("debounce")
    held = q.enqueue({"v": "old"}, dedupe_key="k0", delay=30)
    items = [alkstore.JobSpec({"v": n}, dedupe_key=f"k{n % 3}") for n in range(size)]
    ids = q.enqueue_many(items, on_duplicate="replace", delay=1)
    assert ids[0] == held, "a waiting job's key: replaced in place"
    assert len(set(ids)) == 3 and ids[:3] * (size // 3) == ids
    last = {f"k{n % 3}": n for n in range(size)}
    assert sorted((j.dedupe_key, j.raw_payload["v"]) for j in q.jobs()) == sorted(last.items())
    plain = q.enqueue_many([{"v": "no key"}], on_duplicate="replace")
    assert plain[0] not in ids


def test_replace_needs_a_dedupe_key(cstore: alkstore.Store) -> None:
    q = cstore.queue("debounce")
    with pytest.raises(alkstore.InvalidArgument, match="dedupe_key"):
        q.enqueue({"v": 1}, on_duplicate="replace")
    with pytest.raises(alkstore.InvalidArgument, match="dedupe_key"), cstore.transaction() as tx:
        tx.enqueue("debounce", {"v": 1}, on_duplicate="replace")
    with pytest.raises(alkstore.InvalidArgument, match="replace"):
        q.enqueue_many([{"v": 1}], on_duplicate="merge")  # type: ignore[arg-type]
    assert q.jobs() == []


def test_the_worker_runs_a_debounced_burst_once_with_the_newest_payload(
    backend: Backend,
) -> None:
    with backend.migrated() as store:
        q = store.queue("debounce")
        for v in range(20):
            q.enqueue({"v": v}, dedupe_key="burst", delay=0.3, on_duplicate="replace")
        worker = relay.Worker(store, concurrency=2, poll=0.05)
        seen: list[int] = []

        @worker.handler("debounce")
        def handle(job: alkstore.Job[dict[str, int]]) -> None:
            seen.append(job.payload["v"])

        while q.jobs():
            worker.run(once=True)
        assert seen == [19]


def test_concurrent_replacers_and_a_consumer_keep_one_job_per_key(backend: Backend) -> None:
    """Producers replace one key from several threads while a consumer claims and acks:
    none of them fails, and what waits at the end is the newest write."""
    with backend.migrated(pool_size=6) as store:
        q = store.queue("debounce")
        errors: list[BaseException] = []
        stop = threading.Event()
        acked: list[Any] = []

        def produce(n: int) -> None:
            try:
                for i in range(40):
                    q.enqueue({"p": n, "i": i}, dedupe_key="k", on_duplicate="replace")
            except BaseException as exc:
                errors.append(exc)

        def consume() -> None:
            try:
                while not stop.is_set():
                    job = q.claim()
                    if job is not None:
                        acked.append(job.raw_payload)
                        job.ack()
            except BaseException as exc:
                errors.append(exc)

        consumer = threading.Thread(target=consume)
        consumer.start()
        producers = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
        for thread in producers:
            thread.start()
        for thread in producers:
            thread.join(60)
        stop.set()
        consumer.join(60)
        assert errors == []
        keyed = [j for j in q.jobs() if j.dedupe_key == "k"]
        assert len(keyed) <= 1
        if keyed:  # the last write of all is some producer's last: it replaced the rest
            assert keyed[0].raw_payload["i"] == 39 and keyed[0].attempts == 0
        assert 1 <= len(acked) + len(q.jobs()) <= 120
