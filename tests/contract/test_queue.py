"""Queue semantics (ADR 0006) on both engines, with an injected clock: no sleeping."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced


@pytest.fixture
def clock() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture
def qstore(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock, max_payload_bytes=4096) as store:
        yield store


class Boom(Exception):
    pass


def test_enqueue_claim_ack(qstore: alkstore.Store) -> None:
    q = qstore.queue("emails")
    job_id = q.enqueue(OrderPlaced(order_id=1), headers={"trace": "t1"})
    job = q.claim()
    assert job is not None and job.id == job_id
    assert job.payload == OrderPlaced(order_id=1)
    assert job.headers == {"trace": "t1"} and job.attempt == 1 and job.max_attempts == 5
    assert q.claim() is None  # held by us
    job.ack()
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)
    with pytest.raises(alkstore.LeaseLost):
        job.ack()  # already finished


def test_plain_values_round_trip(qstore: alkstore.Store) -> None:
    q = qstore.queue("plain")
    q.enqueue({"to": "a@example.com", "n": [1, 2]})
    job = q.claim()
    assert job is not None and job.payload == {"to": "a@example.com", "n": [1, 2]}
    assert job.type is None


def test_claim_order_priority_then_run_time_then_enqueue_order(
    qstore: alkstore.Store, clock: Clock
) -> None:
    q = qstore.queue("ordered")
    low_first = q.enqueue("low-1")
    delayed = q.enqueue("delayed", delay=5)
    low_second = q.enqueue("low-2")
    high = q.enqueue("high", priority=10)
    early = q.enqueue("early", run_at=clock.now - 60)
    assert [j.id for j in q.claim_many(10)] == [high, early, low_first, low_second]
    clock.advance(5.001)
    job = q.claim()
    assert job is not None and job.id == delayed


def test_claims_take_jobs_in_order_of_availability_not_creation(
    qstore: alkstore.Store, clock: Clock
) -> None:
    """A job queues by when it became claimable (visible_at), not by when it was made: a
    delayed job, a retried one and one whose lease lapsed each queue from that moment."""
    q = qstore.queue("available")
    delayed = q.enqueue("made first, due at +5", delay=5)
    lapsed, retried = (q.enqueue("lease lapses at +2.5"), q.enqueue("retried, due at +3"))
    claimed = q.claim_many(2, visibility=2.5)
    assert [j.id for j in claimed] == [lapsed, retried]
    claimed[1].retry(delay=3)
    clock.advance(1)
    fresh = q.enqueue("made at +1")
    scheduled = q.enqueue("made last, due at +4", run_at=clock.now + 3)
    clock.advance(9)
    taken = [q.claim() for _ in range(5)]  # one at a time: the claim's own choice
    assert [j.id for j in taken if j] == [fresh, lapsed, retried, scheduled, delayed]


def test_delay_has_millisecond_precision(qstore: alkstore.Store, clock: Clock) -> None:
    q = qstore.queue("precise")
    q.enqueue("x", delay=0.25)
    clock.advance(0.249)
    assert q.claim() is None
    clock.advance(0.002)
    assert q.claim() is not None


def test_run_at_accepts_aware_datetimes(qstore: alkstore.Store, clock: Clock) -> None:
    q = qstore.queue("at")
    when = datetime.fromtimestamp(clock.now + 30, UTC)
    q.enqueue("x", run_at=when)
    assert q.stats().scheduled == 1
    clock.advance(30)
    assert q.claim() is not None
    with pytest.raises(alkstore.InvalidArgument, match="timezone-aware"):
        q.enqueue("x", run_at=datetime(2030, 1, 1))


def test_transactional_enqueue_commits_and_rolls_back(qstore: alkstore.Store) -> None:
    with pytest.raises(Boom), qstore.transaction() as tx:
        tx.enqueue("audit", {"order": 1})
        tx.append(OrderPlaced(order_id=1))
        raise Boom
    assert qstore.queue("audit").stats().ready == 0 and qstore.log.read() == []
    with qstore.transaction() as tx:
        job_id = tx.enqueue("audit", {"order": 2}, delay=10)
        tx.append(OrderPlaced(order_id=2))
    assert job_id is not None
    assert qstore.queue("audit").stats().scheduled == 1 and len(qstore.log.read()) == 1


def test_dedupe_key_while_live(qstore: alkstore.Store) -> None:
    q = qstore.queue("dedupe")
    first = q.enqueue("a", dedupe_key="k")
    with pytest.raises(alkstore.DuplicateJob) as info:
        q.enqueue("b", dedupe_key="k")
    assert (info.value.queue, info.value.key) == ("dedupe", "k")
    assert q.enqueue("b", dedupe_key="k", on_duplicate="ignore") is None
    assert qstore.queue("other").enqueue("c", dedupe_key="k") is not None  # per queue
    # inside a transaction the duplicate does not abort the caller's work
    with qstore.transaction() as tx:
        with pytest.raises(alkstore.DuplicateJob):
            tx.enqueue("dedupe", "c", dedupe_key="k")
        tx.append(OrderPlaced(order_id=9))
    assert len(qstore.log.read()) == 1
    job = q.claim()
    assert job is not None and job.id == first
    job.ack()
    assert q.enqueue("d", dedupe_key="k") is not None  # free again once finished


def test_enqueue_many_is_one_transaction_with_dedupe(qstore: alkstore.Store) -> None:
    q = qstore.queue("batch")
    assert q.enqueue_many([]) == []
    ids = q.enqueue_many(["a", "b", "c"])
    assert len(set(ids)) == 3 and all(isinstance(i, int) for i in ids)
    assert [job.payload for job in q.claim_many(3)] == ["a", "b", "c"]
    with pytest.raises(alkstore.DuplicateJob):
        q.enqueue_many(["d", "e"], dedupe_key="k")  # the second is a duplicate of the first
    assert q.stats().ready == 0, "a duplicate rolls the whole batch back"
    first, second = q.enqueue_many(["d", "e"], dedupe_key="k", on_duplicate="ignore")
    assert isinstance(first, int) and second is None
    assert q.stats().ready == 1


def test_retry_follows_the_configured_curve(qstore: alkstore.Store, clock: Clock) -> None:
    q = qstore.queue("curve")
    q.configure(max_attempts=6, backoff=alkstore.Linear(initial=2, increment=3, max=9))
    q.enqueue("x")
    waits = []
    for _ in range(4):
        job = q.claim(visibility=1000)
        assert job is not None
        job.retry(error="nope")
        waits.append(_next_visible_ms(q, clock))
    assert waits == [2000, 5000, 8000, 9000]


def test_exponential_jitter_is_reproducible_under_a_seed(
    qstore: alkstore.Store, clock: Clock
) -> None:
    curve = alkstore.Exponential(initial=1, factor=2, max=60, jitter=True)

    runs = iter(range(100))

    def schedule(seed: int) -> list[int]:
        q = qstore.queue(f"jitter{next(runs)}")
        q.configure(max_attempts=10, backoff=curve)
        q.enqueue("x")
        qstore.random.seed(seed)
        visible = []
        for _ in range(5):
            job = q.claim(visibility=1000)
            assert job is not None
            job.retry()
            visible.append(_next_visible_ms(q, clock))
        return visible

    first = schedule(1)
    assert first == schedule(1)
    assert first != schedule(2)
    caps = [1000 * min(60, 2**i) for i in range(5)]  # equal jitter: within [curve/2, curve]
    assert all(cap // 2 <= wait <= cap + 1 for wait, cap in zip(first, caps, strict=True))


def _next_visible_ms(q: alkstore.Queue, clock: Clock) -> int:
    """Milliseconds until the queue's only job becomes ready (binary search on the clock,
    which is left at that moment)."""
    start = clock.now
    low, high = 0, 1
    while True:
        clock.now = start + high / 1000
        if q.stats().ready:
            break
        low, high = high, high * 2
    while high - low > 1:  # ready at high, not at low
        mid = (low + high) // 2
        clock.now = start + mid / 1000
        if q.stats().ready:
            high = mid
        else:
            low = mid
    clock.now = start + high / 1000
    return high


def test_per_job_backoff_and_explicit_delay(qstore: alkstore.Store, clock: Clock) -> None:
    q = qstore.queue("override")
    q.configure(backoff=alkstore.Fixed(delay=100))
    q.enqueue("x", backoff=alkstore.Fixed(delay=3))
    job = q.claim()
    assert job is not None
    job.retry()
    clock.advance(3)
    job = q.claim()
    assert job is not None
    job.retry(delay=0.5)
    clock.advance(0.5)
    assert q.claim() is not None


def test_max_attempts_moves_to_dead_letters_with_history(
    qstore: alkstore.Store, clock: Clock
) -> None:
    q = qstore.queue("dying")
    job_id = q.enqueue(OrderPlaced(order_id=3), max_attempts=3, headers={"h": "v"})
    for attempt in (1, 2, 3):
        job = q.claim()
        assert job is not None and job.attempt == attempt
        job.retry(delay=0, error=f"error {attempt}")
    assert q.claim() is None
    (dead,) = q.dead_letters()
    assert (dead.id, dead.reason, dead.attempts, dead.max_attempts) == (job_id, "error 3", 3, 3)
    assert [(a.attempt, a.error) for a in dead.history] == [
        (1, "error 1"),
        (2, "error 2"),
        (3, "error 3"),
    ]
    assert dead.payload == OrderPlaced(order_id=3) and dead.headers == {"h": "v"}
    assert q.stats().dead == 1


def test_fail_goes_straight_to_dead_letters(qstore: alkstore.Store) -> None:
    q = qstore.queue("poison")
    q.enqueue("x")
    job = q.claim()
    assert job is not None
    job.fail("cannot parse")
    (dead,) = q.dead_letters()
    assert dead.reason == "cannot parse" and dead.attempts == 1


def test_requeue_and_purge(qstore: alkstore.Store, clock: Clock) -> None:
    q = qstore.queue("dlq")
    ids = [q.enqueue(i, max_attempts=1) for i in range(4)]
    for job in q.claim_many(4):
        job.fail("bad")
    assert [d.id for d in q.dead_letters()] == ids
    assert [d.id for d in q.dead_letters(limit=2, after=ids[0])] == ids[1:3]
    assert q.requeue([ids[0]]) == 1
    back = q.claim()
    assert back is not None and back.id == ids[0] and back.attempt == 1  # attempts were reset
    back.ack()
    clock.advance(100)
    assert q.purge_dead([ids[1]]) == 1
    assert q.purge_dead(older_than=50) == 2
    assert q.dead_letters() == []
    with pytest.raises(alkstore.InvalidArgument):
        q.purge_dead()


def test_requeue_without_reset_gives_one_more_attempt(qstore: alkstore.Store) -> None:
    q = qstore.queue("again")
    q.enqueue("x", max_attempts=2)
    for _ in range(2):
        job = q.claim()
        assert job is not None
        job.retry(delay=0)
    assert q.requeue(reset_attempts=False) == 1
    job = q.claim()
    assert job is not None and job.attempt == 2
    job.retry(delay=0, error="still failing")
    assert q.dead_letters()[0].reason == "still failing"


def test_requeue_leaves_dead_a_letter_whose_dedupe_key_a_live_job_holds(
    qstore: alkstore.Store,
) -> None:
    """Decided (ADR 0006 addendum 2026-12-01): no error and no second live job with the
    key; the letter stays dead, the count says it did not come back, the rest do."""
    q = qstore.queue("keyed_dlq")
    keyed = q.enqueue("first", dedupe_key="invoice-7", max_attempts=1)
    plain = q.enqueue("plain", max_attempts=1)
    for job in q.claim_many(2):
        job.fail("bad")
    live = q.enqueue("second", dedupe_key="invoice-7")
    assert q.requeue([keyed]) == 0
    assert q.requeue() == 1, "the letter without a key comes back"
    assert [d.id for d in q.dead_letters()] == [keyed]
    jobs = q.claim_many(5)
    assert sorted((j.id, j.payload) for j in jobs) == [(plain, "plain"), (live, "second")]
    for job in jobs:
        job.ack()
    assert q.requeue([keyed]) == 1, "the key is free once the live job is gone"
    back = q.claim()
    assert back is not None and (back.id, back.payload) == (keyed, "first")


def test_heartbeat_extends_the_lease_and_stores_progress(
    qstore: alkstore.Store, clock: Clock
) -> None:
    q = qstore.queue("long")
    q.enqueue("x")
    job = q.claim(visibility=10)
    assert job is not None
    clock.advance(8)
    job.heartbeat(progress={"done": 50})
    clock.advance(8)  # 16 s after the claim: still ours thanks to the heartbeat
    assert q.claim() is None
    job.heartbeat(extend=100)
    clock.advance(90)
    assert q.claim() is None and q.stats().active == 1
    job.ack()


def test_lease_expiry_returns_the_job_and_fences_the_stale_holder(
    qstore: alkstore.Store, clock: Clock
) -> None:
    q = qstore.queue("lease")
    q.enqueue("x", max_attempts=2)
    stale = q.claim(visibility=5)
    assert stale is not None
    clock.advance(5)
    fresh = q.claim(visibility=5)
    assert fresh is not None and fresh.id == stale.id and fresh.attempt == 2
    for operation in (stale.ack, stale.heartbeat, lambda: stale.retry(delay=0)):
        with pytest.raises(alkstore.LeaseLost):
            operation()
    with pytest.raises(alkstore.LeaseLost):
        stale.fail("late")
    clock.advance(5)  # the last attempt's lease runs out too
    assert q.claim() is None  # never hands out an exhausted job
    result = qstore.sweep()
    assert result.ran and result.lease_expired == 1
    (dead,) = q.dead_letters()
    assert dead.reason == "lease expired"
    assert [(a.attempt, a.error) for a in dead.history] == [
        (1, "lease expired"),
        (2, "lease expired"),
    ]


def test_expired_jobs_are_dead_lettered_never_dropped(qstore: alkstore.Store, clock: Clock) -> None:
    q = qstore.queue("expiring")
    claimed_in_time = q.enqueue("in-time", expires=10)
    job = q.claim()
    assert job is not None and job.id == claimed_in_time
    job.retry(delay=20)
    q.enqueue("late", expires=10)  # already claimed once: the deadline no longer applies
    clock.advance(10)
    assert q.stats().ready == 0
    assert qstore.sweep().expired == 1
    assert [(d.payload, d.reason) for d in q.dead_letters()] == [("late", "expired")]
    clock.advance(10)
    assert q.claim() is not None


def test_dead_letter_retention_is_applied_by_the_sweep(
    qstore: alkstore.Store, clock: Clock
) -> None:
    kept, aged = qstore.queue("kept"), qstore.queue("aged")
    aged.configure(dead_retention=60)
    for q in (kept, aged):
        q.enqueue("x", max_attempts=1)
        job = q.claim()
        assert job is not None
        job.fail("bad")
    clock.advance(59)
    assert qstore.sweep().purged == 0
    clock.advance(1)
    assert qstore.sweep().purged == 1
    assert len(kept.dead_letters()) == 1 and aged.dead_letters() == []


def test_sweep_is_cheap_and_idempotent_when_idle(qstore: alkstore.Store) -> None:
    assert qstore.sweep() == alkstore.SweepResult(True, 0, 0, 0)
    assert qstore.sweep() == alkstore.SweepResult(True, 0, 0, 0)


def test_stats(qstore: alkstore.Store, clock: Clock) -> None:
    q = qstore.queue("stats")
    q.enqueue("a")
    clock.advance(2)
    q.enqueue("b")
    q.enqueue("c", delay=30)
    q.enqueue("d", max_attempts=1)
    assert q.stats() == alkstore.QueueStats(3, 1, 0, 0, 2.0)
    jobs = q.claim_many(3)
    jobs[-1].fail("x")
    assert q.stats() == alkstore.QueueStats(0, 1, 2, 1, None)


def test_configuration_is_persisted(qstore: alkstore.Store, backend: Backend) -> None:
    qstore.queue("conf").configure(
        max_attempts=7, backoff=alkstore.Fixed(delay=2), visibility=12, dead_retention=3600
    )
    other = backend.connect()
    try:
        config = other.queue("conf").config()
    finally:
        other.close()
    assert config == alkstore.QueueConfig(
        max_attempts=7, backoff=alkstore.Fixed(delay=2), visibility=12.0, dead_retention=3600.0
    )
    q = qstore.queue("conf")
    q.enqueue("x")
    job = q.claim()
    assert job is not None and job.max_attempts == 7 and job.lease_ms == 12_000


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"delay": -1}, alkstore.InvalidArgument),
        ({"delay": math.nan}, alkstore.InvalidArgument),
        ({"delay": math.inf}, alkstore.InvalidArgument),
        ({"delay": "5"}, alkstore.InvalidArgument),
        ({"delay": 1, "run_at": 2}, alkstore.InvalidArgument),
        ({"expires": -5}, alkstore.InvalidArgument),
        ({"priority": 1.5}, alkstore.InvalidArgument),
        ({"priority": 2**40}, alkstore.InvalidArgument),
        ({"max_attempts": 0}, alkstore.InvalidArgument),
        ({"dedupe_key": ""}, alkstore.InvalidArgument),
        ({"headers": {"a": 1}}, alkstore.EventError),
        ({"backoff": "exponential"}, alkstore.InvalidArgument),
    ],
)
def test_bad_enqueue_options_write_nothing(
    qstore: alkstore.Store, options: dict[str, Any], error: type[Exception]
) -> None:
    q = qstore.queue("strict")
    with pytest.raises(error):
        q.enqueue("x", **options)
    with pytest.raises(error), qstore.transaction() as tx:
        tx.enqueue("strict", "x", **options)
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)


# "Emails", "a-b" and 41 characters were refused before queue names became values (issue
# 14); tests/contract/test_queue_names.py has the names accepted now and more refused ones.
@pytest.mark.parametrize("name", ["", "a b", "x;drop", "é", None, "q" * 201, "-a", "a\x00"])
def test_bad_queue_names(qstore: alkstore.Store, name: object) -> None:
    with pytest.raises(alkstore.InvalidName):
        qstore.queue(name)  # type: ignore[arg-type]
    with pytest.raises(alkstore.InvalidName), qstore.transaction() as tx:
        tx.enqueue(name, "x")  # type: ignore[call-overload]


def test_oversize_and_unencodable_payloads(qstore: alkstore.Store) -> None:
    q = qstore.queue("sizes")
    with pytest.raises(alkstore.PayloadTooLarge) as info:
        q.enqueue("x" * 5000)
    assert info.value.limit == 4096 and info.value.size > 4096
    with pytest.raises(alkstore.EventError):
        q.enqueue(object())
    with pytest.raises(alkstore.EventError):
        q.enqueue_many(["ok", object()])  # validated before anything is written
    assert q.stats().ready == 0


def test_bad_claim_and_retry_arguments(qstore: alkstore.Store) -> None:
    q = qstore.queue("args")
    q.enqueue("x")
    with pytest.raises(alkstore.InvalidArgument):
        q.claim(visibility=0)
    with pytest.raises(alkstore.InvalidArgument):
        q.claim_many(0)
    job = q.claim()
    assert job is not None
    with pytest.raises(alkstore.InvalidArgument):
        job.retry(delay=-1)
    with pytest.raises(alkstore.InvalidArgument):
        job.heartbeat(extend=math.nan)
    job.ack()


def test_release_gives_the_job_back_without_counting_the_attempt(qstore: alkstore.Store) -> None:
    q = qstore.queue("released")
    q.enqueue("x", max_attempts=1)
    job = q.claim()
    assert job is not None
    job.release()
    again = q.claim()
    assert again is not None and again.id == job.id and again.attempt == 1
    with pytest.raises(alkstore.LeaseLost):
        job.release()
    again.ack()


def test_a_queue_object_picks_up_defaults_changed_elsewhere(
    qstore: alkstore.Store, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alkstore import _queue

    mine = qstore.queue("shared")
    assert mine.config().visibility == 30.0  # read and cached
    other = backend.connect()
    try:
        other.queue("shared").configure(visibility=7)
    finally:
        other.close()
    assert mine.config().visibility == 30.0  # still within the cache's lifetime
    monkeypatch.setattr(_queue, "CONFIG_TTL", 0.0)
    assert mine.config().visibility == 7.0  # re-read once the TTL has passed
    mine.enqueue("x")
    job = mine.claim()
    assert job is not None and job.lease_ms == 7_000


def test_a_retry_on_the_default_curve_waits_at_least_half_its_delay(
    qstore: alkstore.Store, clock: Clock
) -> None:
    """Case 19 of issue 14: with full jitter, 6 of 10 first retries were claimable within
    0.5 s of the failure. Equal jitter (the default) waits between 0.5 and 1 s."""
    q = qstore.queue("half")
    qstore.random.seed(19)
    waits = []
    for i in range(10):
        q.enqueue(f"job-{i}")
        job = q.claim(visibility=1000)
        assert job is not None
        job.retry(error="boom")
        waits.append(_next_visible_ms(q, clock))
        assert q.claim() is not None  # out of the way of the next one
    assert all(500 <= wait <= 1000 for wait in waits), waits
