"""Dedupe on the relay's fan-out and so on schedules (ADR 0022): a subscription made with
`dedupe_by_key=True` gives each job its event's key as dedupe key, so while a job with
that key is live in the queue, later events with it make no job; events without a key
always make one. Both engines, on an injected clock."""

from __future__ import annotations

import pytest

import alkstore
from tests.clock import Clock
from tests.events import OrderPlaced


def _append(store: alkstore.Store, *keys: str | None) -> None:
    with store.transaction() as tx:
        for n, key in enumerate(keys):
            tx.append(OrderPlaced(order_id=n, total_cents=n), key=key)


def _jobs(q: alkstore.Queue) -> list[tuple[str | None, str | None, int | None]]:
    return [(j.key, j.dedupe_key, j.position) for j in q.jobs()]


def test_events_with_a_live_key_make_no_job(sstore: alkstore.Store) -> None:
    sstore.subscribe("digest", ["test.*"], start="beginning", dedupe_by_key=True)
    sstore.subscribe("audit", ["test.*"], start="beginning")  # beside it, as before
    _append(sstore, "a", "a", "b", None, "a", None, "b")
    assert sstore.relay_batch() == (11, 7)  # digest: a, b, two without a key; audit: 7
    digest = sstore.queue("digest")
    assert _jobs(digest) == [("a", "a", 1), ("b", "b", 3), (None, None, 4), (None, None, 6)]
    assert len(sstore.queue("audit").jobs()) == 7
    job = digest.claim()
    assert job is not None and job.key == "a"
    _append(sstore, "a")  # "a" is still live (running): no job
    assert sstore.relay_batch() == (1, 1)
    job.ack()
    _append(sstore, "a", "a")  # free again: the first of these makes a job
    assert sstore.relay_batch() == (3, 2)
    assert [(k, p) for k, _, p in _jobs(digest)] == [("b", 3), (None, 4), (None, 6), ("a", 9)]


def test_resubscribing_turns_it_off(sstore: alkstore.Store) -> None:
    sstore.subscribe("digest", ["test.*"], start="beginning", dedupe_by_key=True)
    _append(sstore, "a", "a")
    sstore.relay_batch()
    sstore.subscribe("digest", ["test.*"])  # dedupe_by_key defaults to False
    _append(sstore, "a")
    sstore.relay_batch()
    assert _jobs(sstore.queue("digest")) == [("a", "a", 1), ("a", None, 3)]
    with pytest.raises(alkstore.InvalidArgument):
        sstore.subscribe("digest", ["test.*"], dedupe_by_key="yes")  # type: ignore[arg-type]


def test_a_schedule_with_a_key_does_not_pile_up(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.subscribe("reports", ["test.*"], dedupe_by_key=True)
    sstore.schedules.add("nightly", every="60s", event=OrderPlaced(order_id=1), key="nightly")
    fired = 0
    for _ in range(3):  # three firings while nobody handles the job
        fired += sstore.fire_schedules()
        clock.advance(60)
    assert fired == 3
    sstore.relay_batch()
    reports = sstore.queue("reports")
    assert [j.dedupe_key for j in reports.jobs()] == ["nightly"]
    job = reports.claim()
    assert job is not None
    job.ack()
    sstore.fire_schedules()
    sstore.relay_batch()
    assert [j.dedupe_key for j in reports.jobs()] == ["nightly"], "the next firing runs"
