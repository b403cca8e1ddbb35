"""Retention with a default (docs/adr/0018): the sweep keeps dead letters 14 days unless
their queue says otherwise, and the log's events 7 days after every subscription relayed
them; None (or 0 on the processes) keeps either forever."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import alkstore
import relay
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced

DAY = 86_400


@pytest.fixture
def clock() -> Clock:
    return Clock()  # the real time: the log's appended_at is the database's


@pytest.fixture
def rstore(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock) as store:
        yield store


def bury(store: alkstore.Store, queue: str, n: int = 1) -> None:
    q = store.queue(queue)
    for _ in range(n):
        q.enqueue("x", max_attempts=1)
        job = q.claim()
        assert job is not None
        job.fail("bad")


def dead(store: alkstore.Store, queue: str) -> int:
    return len(store.queue(queue).dead_letters(limit=1_000))


def test_the_defaults() -> None:
    assert alkstore.Retention() == alkstore.Retention(dead_letters=14 * DAY, log=7 * DAY)
    for bad in (0, -1, float("inf"), True, "7d"):
        with pytest.raises(alkstore.InvalidArgument, match="retention log"):
            alkstore.Retention(log=bad)  # type: ignore[arg-type]


def test_dead_letters_are_kept_14_days_by_default(rstore: alkstore.Store, clock: Clock) -> None:
    bury(rstore, "old", 3)
    rstore.queue("longer").configure(dead_retention=30 * DAY)
    rstore.queue("shorter").configure(dead_retention=DAY)
    bury(rstore, "longer")
    bury(rstore, "shorter")
    clock.advance(DAY + 1)
    bury(rstore, "old")  # a day younger
    assert rstore.sweep().purged == 1, "the queue that keeps a day"
    clock.advance(13 * DAY - 1)
    assert rstore.sweep().purged == 3, "14 days: the default"
    assert (dead(rstore, "old"), dead(rstore, "longer"), dead(rstore, "shorter")) == (1, 1, 0)
    clock.advance(DAY + 1)  # the younger one is 14 days old
    assert rstore.sweep(alkstore.Retention(dead_letters=None)).purged == 0, "kept forever"
    assert rstore.sweep().purged == 1
    clock.advance(16 * DAY)
    assert rstore.sweep().purged == 1
    assert (dead(rstore, "old"), dead(rstore, "longer")) == (0, 0)


def test_the_log_is_kept_7_days_after_every_subscription_passed_it(
    rstore: alkstore.Store, clock: Clock
) -> None:
    rstore.subscribe("fast", ["*"], start="beginning")
    rstore.subscribe("slow", ["*"], start="beginning")
    with rstore.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=n) for n in range(1, 6)])
    rstore.relay_batch()
    rstore.replay("slow", 4)  # slow still needs 4 and 5
    clock.advance(7 * DAY - 60)
    assert rstore.sweep().pruned_events == 0, "younger than the window"
    clock.advance(120)
    assert rstore.sweep(alkstore.Retention(log=None)).pruned_events == 0, "kept forever"
    result = rstore.sweep()
    assert result.pruned_events == 3
    assert [e.position for e in rstore.log.read()] == [4, 5]
    rstore.unsubscribe("slow")
    assert rstore.sweep().pruned_events == 2
    assert rstore.log.read() == [] and rstore.log.head() == 5


def test_a_sweep_prunes_in_bounded_batches(
    rstore: alkstore.Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alkstore import _maintenance, _queue

    monkeypatch.setattr(_queue, "SWEEP_BATCH", 2)
    monkeypatch.setattr(_maintenance, "LOG_BATCH", 2)
    monkeypatch.setattr(_maintenance, "RETENTION_BUDGET", 0.0)  # one batch per sweep
    bury(rstore, "q", 3)
    rstore.subscribe("all", ["*"], start="beginning")
    with rstore.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=n) for n in range(5)])
    rstore.relay_batch()
    clock.advance(15 * DAY)
    first = rstore.sweep()
    assert (first.purged, first.pruned_events) == (2, 2)
    second = rstore.sweep()
    assert (second.purged, second.pruned_events) == (1, 2)
    assert rstore.sweep().pruned_events == 1
    assert rstore.sweep() == alkstore.SweepResult(True)


@pytest.mark.parametrize("factory", [relay.Relay, relay.Worker])
def test_relay_and_worker_apply_the_default_policy(
    store: alkstore.Store, factory: type[relay.Relay] | type[relay.Worker]
) -> None:
    process = factory(store)
    assert (process.retention, process.dead_retention) == (7 * DAY, 14 * DAY)
    off = factory(store, retention=0, dead_retention=None)
    assert (off.retention, off.dead_retention) == (None, None)
    for bad in (-1, float("nan")):
        with pytest.raises(alkstore.InvalidArgument, match="dead_retention"):
            factory(store, dead_retention=bad)


def test_the_relay_sweeps_with_its_policy(store: alkstore.Store) -> None:
    loop = relay.Relay(store, lease_ttl=1, poll=0.05, retention=0, dead_retention=3_600)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while (retention := store.status().retention) is None or retention.source != "sweep":
            assert time.monotonic() < deadline, "no sweep recorded"
            time.sleep(0.05)
    finally:
        loop.stop()
        thread.join(30)
    assert (retention.dead_letters, retention.log) == (3_600.0, None)
