"""`store.status()` beyond the log (docs/adr/0018): every queue with its counts per
state (queues fed only by tx.enqueue included), schedules with their next fire, who
leads, the workers, and the retention in effect."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import msgspec

import alkstore
from tests.clock import Clock
from tests.events import OrderPlaced

HOST = f"{socket.gethostname()}:{os.getpid()}"


class ReportDue(alkstore.Event, tag="test.report_due"):
    pass


def test_an_enqueue_only_queue_is_counted_per_state(sstore: alkstore.Store, clock: Clock) -> None:
    with sstore.transaction() as tx:  # no subscription, no configure(): jobs alone
        tx.enqueue("audit", {"n": 1})
        tx.enqueue("audit", {"n": 2}, max_attempts=1)
        tx.enqueue("audit", {"n": 3}, delay=60)
    clock.advance(2)
    with sstore.transaction() as tx:
        tx.enqueue("audit", {"n": 4})
        tx.enqueue("audit", {"n": 5})
    audit = sstore.queue("audit")
    first, second = audit.claim_many(2)  # the two oldest: n=1 runs, n=2 dies
    second.fail("boom")
    clock.advance(1.5)

    (queue,) = sstore.status().queues
    assert queue.name == "audit"
    assert (queue.ready, queue.scheduled, queue.running, queue.dead) == (2, 1, 1, 1)
    assert queue.oldest_ready_age == 1.5
    assert (queue.paused, queue.dead_retention) == (False, None)
    stats = audit.stats()
    assert (stats.ready, stats.scheduled, stats.active, stats.dead) == (2, 1, 1, 1)
    assert stats.oldest_ready_age == queue.oldest_ready_age
    first.ack()


def test_every_queue_is_listed_in_byte_order(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.subscribe("sub.only", ["test.*"])  # a subscription, no job yet
    sstore.queue("Configured").configure(max_attempts=2, dead_retention=3_600)
    sstore.queue("dead.only").enqueue("x", max_attempts=1)
    job = sstore.queue("dead.only").claim()
    assert job is not None
    job.fail("gone")
    with sstore.transaction() as tx:
        tx.enqueue("a-enqueued", {"n": 1})
    queues = sstore.status().queues
    assert [q.name for q in queues] == ["Configured", "a-enqueued", "dead.only", "sub.only"]
    counts = {q.name: (q.ready, q.scheduled, q.running, q.dead) for q in queues}
    assert counts == {
        "Configured": (0, 0, 0, 0),
        "a-enqueued": (1, 0, 0, 0),
        "dead.only": (0, 0, 0, 1),
        "sub.only": (0, 0, 0, 0),
    }
    assert {q.name: q.dead_retention for q in queues}["Configured"] == 3_600.0


def test_schedules_show_their_next_fire(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("nightly", cron="0 3 * * *", tz="Europe/Berlin", event=ReportDue())
    sstore.schedules.add("often", every="90s", event=ReportDue())
    sstore.schedules.pause("often")
    nightly, often = sstore.status().schedules
    assert (nightly.name, nightly.cron, nightly.tz, nightly.every) == (
        "nightly",
        "0 3 * * *",
        "Europe/Berlin",
        None,
    )
    assert nightly.event_type == "test.report_due" and not nightly.paused
    assert nightly.next_fire == datetime(2026, 1, 5, 2, 0, tzinfo=UTC)  # 03:00 in Berlin
    assert (often.name, often.every, often.paused, often.next_fire) == ("often", 90.0, True, None)


def test_leaders_workers_and_retention(sstore: alkstore.Store, clock: Clock) -> None:
    before = sstore.status()
    assert [(x.role, x.holder, x.active) for x in before.leaders] == [
        ("relay", None, False),
        ("scheduler", None, False),
        ("sweeper", None, False),
    ]
    assert before.retention is not None
    assert (before.retention.source, before.retention.dead_letters, before.retention.log) == (
        "default",
        14 * 86_400,
        7 * 86_400,
    )
    assert before.workers == []

    lease = sstore.lease("relay", ttl=3)
    assert lease.acquire()
    presence = sstore.worker_presence(["emails"], 4)
    sstore.sweep(alkstore.Retention(dead_letters=3_600, log=None))
    clock.advance(1)
    now = sstore.status()
    relay_leader, scheduler, sweeper = now.leaders
    assert (relay_leader.role, relay_leader.holder, relay_leader.active) == (
        "relay",
        lease.holder,
        True,
    )
    assert relay_leader.expires_in == 2.0
    assert (scheduler.holder, scheduler.active) == (None, False)
    assert (sweeper.role, sweeper.holder, sweeper.active, sweeper.ago) == (
        "sweeper",
        HOST,
        True,
        1.0,
    )
    assert now.retention is not None
    assert (now.retention.source, now.retention.swept_by) == ("sweep", HOST)
    assert (now.retention.dead_letters, now.retention.log) == (3_600.0, None)
    (worker,) = now.workers
    assert (worker.id, worker.queues, worker.concurrency, worker.alive) == (
        presence.id,
        ["emails"],
        4,
        True,
    )

    lease.release()
    clock.advance(120)  # no sweep for two minutes: maintenance is not running
    later = sstore.status()
    assert [(x.role, x.holder, x.active) for x in later.leaders] == [
        ("relay", lease.holder, False),  # released: the last holder, not active
        ("scheduler", None, False),
        ("sweeper", HOST, False),
    ]
    (dead,) = later.workers
    assert not dead.alive and dead.seen_ago == 121.0
    presence.leave()
    assert sstore.status().workers == []


def test_status_as_json_keeps_its_keys(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.subscribe("orders", ["test.*"], start="beginning")
    with sstore.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
    decoded = msgspec.json.decode(msgspec.json.encode(sstore.status()))
    assert list(decoded) == [
        "head",
        "subscriptions",
        "holdups",
        "unsequenced",
        "oldest_appender",
        "queues",
        "schedules",
        "leaders",
        "workers",
        "retention",
        "oldest_retained",
        "hidden_holdups",
    ]
    assert list(decoded["subscriptions"][0]) == [
        "queue",
        "checkpoint",
        "events",
        "seconds",
        "gap",
        "sink",  # ADR 0026: added keys, none renamed (ADR 0018)
        "parked",
    ]
    assert list(decoded["queues"][0]) == [
        "name",
        "ready",
        "scheduled",
        "running",
        "dead",
        "oldest_ready_age",
        "paused",
        "dead_retention",
    ]
    assert list(decoded["leaders"][0]) == ["role", "holder", "active", "expires_in", "ago"]
    assert list(decoded["retention"]) == ["dead_letters", "log", "source", "swept_by"]
