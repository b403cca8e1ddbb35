"""Per-key ordered delivery (docs/adr/0021): the paths the model test does not take —
the relay's fan-out by event key, requeue, the operator's view and retry, next_due."""

from __future__ import annotations

import alkstore
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import Written


def test_relayed_jobs_are_ordered_by_event_key(store: alkstore.Store) -> None:
    store.subscribe("keyed", ["test.written"], start="beginning", ordered=True)
    with store.transaction() as tx:
        for seq in range(3):
            for key in ("x", "y"):
                tx.append(Written(writer=0, seq=seq), key=key)
        tx.append(Written(writer=0, seq=9))  # no key: not ordered
    store.relay_batch(None)
    queue = store.queue("keyed")
    seen = []
    while jobs := queue.claim_many(10):
        seen.append(sorted((job.key or "-", job.raw_payload["seq"]) for job in jobs))
        for job in jobs:
            job.ack()
    assert seen == [[("-", 9), ("x", 0), ("y", 0)], [("x", 1), ("y", 1)], [("x", 2), ("y", 2)]]


def test_an_unordered_queue_ignores_keys(store: alkstore.Store) -> None:
    queue = store.queue("plain")
    for n in range(3):
        queue.enqueue(n, group="g")
    assert len(queue.claim_many(10)) == 3


def test_held_jobs_wait_in_view_and_operator_retry_keeps_the_order(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        queue = store.queue("held")
        queue.configure(ordered=True, on_head_failure="park", max_attempts=1)
        first = queue.enqueue("a", group="k")
        second = queue.enqueue("b", group="k", delay=5)
        states = {info.id: (info.state, info.visible_at) for info in queue.jobs()}
        assert states[first][0] == "ready" and states[second][0] == "held"
        assert states[second][1].timestamp() == clock.now + 5  # its own run time
        assert queue.next_due() == 0.0
        queue.retry(second)  # the operator's "run now": still behind the head
        job = queue.claim()
        assert job is not None and job.id == first and queue.claim() is None
        job.retry(error="boom")  # the last attempt: parked
        assert queue.parked() == {"k": first}
        assert queue.next_due() is None  # parked and held jobs fall due at no time
        assert {i.id: i.state for i in queue.jobs()} == {first: "parked", second: "held"}
        assert queue.claim() is None
        assert queue.unpark("k", drop=True, reason="skip it") == first
        job = queue.claim()
        assert job is not None and job.id == second  # its retry made it due now
        assert [d.reason for d in queue.dead_letters()] == ["skip it"]


def test_a_requeued_head_waits_behind_the_live_head(store: alkstore.Store) -> None:
    queue = store.queue("requeued")
    queue.configure(ordered=True, on_head_failure="dead_letter")
    ids = [queue.enqueue(n, group="k") for n in range(3)]
    job = queue.claim()
    assert job is not None and job.id == ids[0]
    job.retry(error="boom")  # dead_letter: gone at once, the key goes on
    job = queue.claim()
    assert job is not None and job.id == ids[1]
    assert queue.requeue() == 1  # back behind the running head, before the third job
    assert queue.claim() is None
    job.ack()
    order = []
    while job := queue.claim():
        order.append(job.id)
        job.ack()
    assert order == [ids[0], ids[2]]
