"""Routing (the relay's storage half) on both engines, in-process.

Subscriptions turn committed events into jobs: one job per matching subscription,
carrying the event's type, key, headers, payload and log position. These tests
drive `store.relay_batch(lease=None)` step by step (and `relay.Relay` in a thread
for the wake-driven loop); the relay as a separate process, killed and failed
over, is in tests/faults/test_relay_*.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import alkstore
import relay
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced


class OrderCreated(alkstore.Event, tag="order.created"):
    order_id: int


class OrderShipped(alkstore.Event, tag="order.shipped"):
    order_id: int


class OrderShippedV2(alkstore.Event, tag="order.shipped.v2"):
    order_id: int


class OrdersArchived(alkstore.Event, tag="orders.archived"):
    day: int


class PaymentSettled(alkstore.Event, tag="payment.settled"):
    cents: int


class OrderXPlaced(alkstore.Event, tag="test.orderXplaced"):
    """Differs from `test.order_placed` exactly where LIKE's `_` would match anything."""

    order_id: int


class ShoutedOrderCreated(alkstore.Event, tag="ORDER.CREATED"):
    """Same letters as `order.created`, other case: a different event type."""

    order_id: int


# -- helpers ----------------------------------------------------------------------------


def append(
    store: alkstore.Store,
    *events: alkstore.Event,
    key: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Append `events` in one committed transaction."""
    with store.transaction() as tx:
        tx.append_many(events, key=key, headers=headers)


def relay_all(store: alkstore.Store, batch: int = 5_000) -> tuple[int, int]:
    """Run relay batches until one covers nothing: (jobs created, positions covered)."""
    jobs = covered = 0
    while True:
        j, c = store.relay_batch(None, batch)
        if c == 0:
            return jobs, covered
        jobs += j
        covered += c


def drain(store: alkstore.Store, queue: str) -> list[alkstore.Job[Any]]:
    """Claim and ack every visible job of `queue` (claim order: enqueue order here)."""
    out: list[alkstore.Job[Any]] = []
    q = store.queue(queue)
    while batch := q.claim_many(1_000, visibility=600):
        assert q.ack_many(batch) == []
        out.extend(batch)
    return out


def types_in(store: alkstore.Store, queue: str) -> list[str]:
    """The event types of `queue`'s jobs, in position order (claims them)."""
    jobs = sorted(drain(store, queue), key=lambda job: job.position)
    return [job.type for job in jobs]


def positions_in(store: alkstore.Store, queue: str) -> list[int]:
    return sorted(job.position for job in drain(store, queue))


def checkpoints(store: alkstore.Store) -> dict[str, int]:
    return {s.queue: s.checkpoint for s in store.subscriptions()}


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)


@contextmanager
def running_relay(store: alkstore.Store, **options: Any) -> Iterator[relay.Relay]:
    """`relay.Relay(store, **options).run()` in a thread; stopped and joined at exit."""
    loop = relay.Relay(store, **options)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loop.run()
        except BaseException as exc:  # reported by the test, not as a thread warning
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-relay", daemon=True)
    thread.start()
    try:
        wait_until(lambda: loop.is_leader or bool(errors), 15, "the relay to take the lease")
        yield loop
    finally:
        loop.stop()
        # stop() does not interrupt the loop's wait on the wake (up to `poll` s): fire it.
        store.engine.wake.fire()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the relay thread did not stop"
    if errors:
        raise errors[0]


# -- fan-out ------------------------------------------------------------------------------


def test_one_event_matching_three_subscriptions_becomes_three_jobs(
    store: alkstore.Store,
) -> None:
    store.subscribe("billing", ["order.created"])
    store.subscribe("shipping", ["order.*"])
    store.subscribe("audit", ["*"])
    store.subscribe("payments", ["payment.*"])  # does not match
    append(store, OrderCreated(order_id=7), key="order-7", headers={"trace": "t-7"})
    (entry,) = store.log.read()

    assert store.relay_batch() == (3, 1)

    for queue in ("audit", "billing", "shipping"):
        jobs = drain(store, queue)
        assert len(jobs) == 1, f"{queue}: {jobs}"
        job = jobs[0]
        assert job.queue == queue
        assert job.type == "order.created"
        assert job.key == "order-7"
        assert job.headers == {"trace": "t-7"}
        assert job.payload == OrderCreated(order_id=7)
        assert isinstance(job.payload, OrderCreated)
        assert job.position == entry.position == 1
        assert job.attempt == 1 and job.max_attempts == 5
    assert drain(store, "payments") == []
    assert checkpoints(store) == {"audit": 1, "billing": 1, "payments": 1, "shipping": 1}
    assert store.relay_batch() == (0, 0), "a second batch must not relay anything again"
    for queue in ("audit", "billing", "payments", "shipping"):
        assert store.queue(queue).stats().ready == 0


def test_jobs_follow_log_order_and_batches_split_the_log(store: alkstore.Store) -> None:
    store.subscribe("audit", ["*"])
    for n in range(7):
        append(store, OrderCreated(order_id=n), key=f"k{n}")
    assert store.relay_batch(batch=3) == (3, 3)
    assert checkpoints(store) == {"audit": 3}
    assert relay_all(store, batch=3) == (4, 4)
    jobs = drain(store, "audit")
    assert [job.position for job in jobs] == [1, 2, 3, 4, 5, 6, 7]
    assert [job.payload for job in jobs] == [OrderCreated(order_id=n) for n in range(7)]
    assert [job.key for job in jobs] == [f"k{n}" for n in range(7)]


# -- patterns -------------------------------------------------------------------------------

ALL_EVENTS: list[alkstore.Event] = [
    OrderCreated(order_id=1),
    OrderShipped(order_id=1),
    OrderShippedV2(order_id=1),
    OrdersArchived(day=1),
    PaymentSettled(cents=100),
    OrderPlaced(order_id=1),
    OrderXPlaced(order_id=1),
]
EVERY_TYPE = [
    "order.created",
    "order.shipped",
    "order.shipped.v2",
    "orders.archived",
    "payment.settled",
    "test.order_placed",
    "test.orderXplaced",
]


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["order.created"], ["order.created"]),
        (["order.*"], ["order.created", "order.shipped", "order.shipped.v2"]),
        (["*"], EVERY_TYPE),
        (["*.created"], ["order.created"]),
        (["order.*.v2"], ["order.shipped.v2"]),
        (["orders.*", "payment.settled"], ["orders.archived", "payment.settled"]),
        (["test.order_placed"], ["test.order_placed"]),
        (["test.order_*"], ["test.order_placed"]),
        (["test.order*"], ["test.order_placed", "test.orderXplaced"]),
        (["order.created", "order.*"], ["order.created", "order.shipped", "order.shipped.v2"]),
        (["nothing.matches", "order"], []),
    ],
)
def test_patterns_select_event_types(
    store: alkstore.Store, patterns: list[str], expected: list[str]
) -> None:
    """Exact types, `*` as a wildcard anywhere (across dots too), several patterns per
    subscription (an event matching two of them is still one job); `_` is literal."""
    store.subscribe("q", patterns)
    append(store, *ALL_EVENTS)
    relay_all(store)
    assert types_in(store, "q") == expected
    assert checkpoints(store) == {"q": len(ALL_EVENTS)}


def test_underscore_and_percent_are_not_wildcards(store: alkstore.Store) -> None:
    """The patterns become SQL LIKE patterns; LIKE's `_` and `%` must not leak through."""
    store.subscribe("placed", ["test.order_placed"])
    append(store, OrderXPlaced(order_id=1), OrderPlaced(order_id=2))
    relay_all(store)
    jobs = drain(store, "placed")
    assert [(job.type, job.position) for job in jobs] == [("test.order_placed", 2)]
    # `%` cannot be written as a pattern at all (so it can never act as LIKE's `%`)
    for pattern in ("test.order%", "%", "order.%created"):
        with pytest.raises(alkstore.InvalidArgument, match="invalid event pattern"):
            store.subscribe("percent", [pattern])
    assert [s.queue for s in store.subscriptions()] == ["placed"]


def test_patterns_are_case_sensitive(
    store: alkstore.Store, backend: Backend, request: pytest.FixtureRequest
) -> None:
    """Event types are case-sensitive strings: `order.created` is not `ORDER.CREATED`."""
    store.subscribe("exact", ["order.created"])
    store.subscribe("glob", ["order.*"])
    append(store, ShoutedOrderCreated(order_id=1), OrderCreated(order_id=2))
    relay_all(store)
    assert types_in(store, "exact") == ["order.created"]
    assert types_in(store, "glob") == ["order.created"]


@pytest.mark.parametrize(
    "events",
    [
        [],
        [""],
        ["order created"],
        ["order.?"],
        ["order.[ab]"],
        ["a\\b"],
        ["o" * 201],
        ["order.*", "bad pattern"],
        [1],
        [None],
        "",
    ],
    ids=repr,
)
def test_invalid_patterns_raise_and_store_nothing(store: alkstore.Store, events: Any) -> None:
    with pytest.raises(alkstore.InvalidArgument):
        store.subscribe("q", events)
    assert store.subscriptions() == []


def test_a_single_pattern_string_is_one_pattern(store: alkstore.Store) -> None:
    sub = store.subscribe("q", "order.*")
    assert sub.events == ["order.*"]
    assert store.subscriptions() == [alkstore.Subscription("q", ["order.*"], 0)]


def test_invalid_subscribe_arguments_raise_typed_errors(store: alkstore.Store) -> None:
    with pytest.raises(alkstore.InvalidName):
        store.subscribe("Not A Queue", ["*"])
    for start in ("later", "", -1, True, 1.5, None):
        with pytest.raises(alkstore.InvalidArgument, match="start must be"):
            store.subscribe("q", ["*"], start=start)  # type: ignore[arg-type]
    with pytest.raises(alkstore.InvalidArgument):
        store.subscribe("q", ["*"], max_attempts=0)
    with pytest.raises(alkstore.InvalidArgument):
        store.subscribe("q", ["*"], visibility=-1)
    assert store.subscriptions() == []
    assert store.queue("q").config() == alkstore.QueueConfig()


# -- where a subscription starts ---------------------------------------------------------


def test_start_now_gets_only_new_events(store: alkstore.Store) -> None:
    append(store, OrderCreated(order_id=1), OrderCreated(order_id=2))
    sub = store.subscribe("q", ["*"])  # start="now" is the default
    assert sub == alkstore.Subscription("q", ["*"], 2)
    assert relay_all(store) == (0, 0)
    append(store, OrderCreated(order_id=3))
    relay_all(store)
    jobs = drain(store, "q")
    assert [(job.position, job.payload) for job in jobs] == [(3, OrderCreated(order_id=3))]


def test_start_beginning_gets_the_whole_retained_history(backend: Backend) -> None:
    clock = Clock()
    store = backend.connect(clock=clock)
    try:
        store.migrate()
        store.subscribe("early", ["*"], start="beginning")
        append(store, *(OrderCreated(order_id=n) for n in range(1, 11)))
        relay_all(store)
        drain(store, "early")
        clock.advance(3_600)
        assert store.prune_log(older_than=60) == 10  # the only subscription passed them all
        append(store, *(OrderCreated(order_id=n) for n in range(11, 14)))
        assert [e.position for e in store.log.read()] == [11, 12, 13]

        sub = store.subscribe("late", ["*"], start="beginning")
        assert sub.checkpoint == 0
        relay_all(store)
        jobs = drain(store, "late")
        assert [job.position for job in jobs] == [11, 12, 13]
        assert [job.payload for job in jobs] == [OrderCreated(order_id=n) for n in (11, 12, 13)]
        assert positions_in(store, "early") == [11, 12, 13]
    finally:
        store.close()


def test_an_integer_start_is_the_first_position_delivered(store: alkstore.Store) -> None:
    """`start=n` delivers from position n on, as `replay(queue, n)` re-delivers from n."""
    append(store, *(OrderCreated(order_id=n) for n in range(1, 6)))
    assert store.subscribe("from3", ["*"], start=3).checkpoint == 2
    assert store.subscribe("from1", ["*"], start=1).checkpoint == 0
    assert store.subscribe("from6", ["*"], start=6).checkpoint == 5
    with pytest.raises(alkstore.InvalidArgument):
        store.subscribe("from0", ["*"], start=0)
    relay_all(store)
    assert positions_in(store, "from3") == [3, 4, 5]
    assert positions_in(store, "from1") == [1, 2, 3, 4, 5]
    assert positions_in(store, "from6") == []
    assert set(checkpoints(store).values()) == {5}


def test_resubscribing_keeps_the_checkpoint_and_updates_the_patterns(
    store: alkstore.Store,
) -> None:
    store.subscribe("q", ["order.*"], start="beginning")
    append(store, OrderCreated(order_id=1), PaymentSettled(cents=1))
    relay_all(store)
    assert types_in(store, "q") == ["order.created"]

    again = store.subscribe("q", ["payment.*"], start="beginning")
    assert again == alkstore.Subscription("q", ["payment.*"], 2), "the checkpoint was reset"
    assert store.subscriptions() == [alkstore.Subscription("q", ["payment.*"], 2)]
    assert store.subscribe("q", ["payment.*"], start=1).checkpoint == 2
    assert relay_all(store) == (0, 0), "nothing is relayed again"

    append(store, OrderCreated(order_id=2), PaymentSettled(cents=2))
    relay_all(store)
    jobs = drain(store, "q")
    assert [(job.type, job.position) for job in jobs] == [("payment.settled", 4)]


def test_queue_options_passed_to_subscribe_are_stored(store: alkstore.Store) -> None:
    store.subscribe(
        "q",
        ["*"],
        max_attempts=2,
        visibility=7.5,
        backoff=alkstore.Fixed(3.0),
        dead_retention=60.0,
    )
    expected = alkstore.QueueConfig(
        max_attempts=2, backoff=alkstore.Fixed(3.0), visibility=7.5, dead_retention=60.0
    )
    assert store.queue("q").config() == expected
    append(store, OrderCreated(order_id=1))
    relay_all(store)
    job = store.queue("q").claim()
    assert job is not None and job.max_attempts == 2, "the relay ignored the queue's max_attempts"
    job.ack()

    # re-subscribing with some options changes those and keeps the others
    store.subscribe("q", ["*"], max_attempts=4)
    assert store.queue("q").config() == alkstore.QueueConfig(
        max_attempts=4, backoff=alkstore.Fixed(3.0), visibility=7.5, dead_retention=60.0
    )
    store.subscribe("q", ["order.*"])  # no options: the stored ones stay
    assert store.queue("q").config().max_attempts == 4


# -- skipping, unsubscribing -------------------------------------------------------------


def test_events_nobody_subscribed_to_are_skipped_and_every_checkpoint_advances(
    store: alkstore.Store,
) -> None:
    store.subscribe("orders", ["order.*"], start="beginning")
    store.subscribe("payments", ["payment.*"], start="beginning")
    append(store, OrdersArchived(day=1), OrdersArchived(day=2), OrdersArchived(day=3))
    assert store.relay_batch() == (0, 3)
    assert checkpoints(store) == {"orders": 3, "payments": 3}
    status = store.status()
    assert status.head == 3
    assert [(lag.queue, lag.events, lag.seconds) for lag in status.subscriptions] == [
        ("orders", 0, None),
        ("payments", 0, None),
    ]
    # only a subset matches: each checkpoint still reaches the head
    append(store, OrdersArchived(day=4), PaymentSettled(cents=1), OrdersArchived(day=5))
    assert store.relay_batch() == (1, 3)
    assert checkpoints(store) == {"orders": 6, "payments": 6}
    assert positions_in(store, "payments") == [5]
    assert positions_in(store, "orders") == []


def test_no_subscriptions_means_nothing_to_do(store: alkstore.Store) -> None:
    append(store, OrderCreated(order_id=1))
    assert store.relay_batch() == (0, 0)
    assert store.status().subscriptions == []


def test_unsubscribe_stops_routing_and_keeps_existing_jobs(store: alkstore.Store) -> None:
    store.subscribe("a", ["*"], start="beginning")
    store.subscribe("b", ["*"], start="beginning")
    append(store, OrderCreated(order_id=1))
    relay_all(store)

    assert store.unsubscribe("a") is True
    assert store.unsubscribe("a") is False
    assert store.unsubscribe("never") is False
    assert [s.queue for s in store.subscriptions()] == ["b"]

    append(store, OrderCreated(order_id=2))
    relay_all(store)
    assert store.queue("a").stats().ready == 1, "unsubscribing must keep the queue's jobs"
    a_jobs = drain(store, "a")
    assert [(job.position, job.payload) for job in a_jobs] == [(1, OrderCreated(order_id=1))]
    assert positions_in(store, "b") == [1, 2]

    # subscribing again starts over (a new subscription, not the old checkpoint)
    assert store.subscribe("a", ["*"]).checkpoint == 2


# -- replay ----------------------------------------------------------------------------------


def test_replay_moves_the_checkpoint_back_and_redelivers(store: alkstore.Store) -> None:
    store.subscribe("q", ["*"], start="beginning")
    store.subscribe("other", ["*"], start="beginning")
    append(store, *(OrderCreated(order_id=n) for n in range(1, 6)))
    relay_all(store)
    drain(store, "q")
    first = drain(store, "other")
    assert [job.position for job in first] == [1, 2, 3, 4, 5]

    store.replay("q", 3)
    assert checkpoints(store) == {"other": 5, "q": 2}
    lag = {lag.queue: lag for lag in store.status().subscriptions}
    assert lag["q"].events == 3 and lag["q"].seconds is not None
    assert store.relay_batch() == (3, 3)
    again = drain(store, "q")
    assert [(job.position, job.payload) for job in again] == [
        (n, OrderCreated(order_id=n)) for n in (3, 4, 5)
    ]
    assert drain(store, "other") == [], "a replay of one queue re-delivered to another"
    assert checkpoints(store) == {"other": 5, "q": 5}

    # at-least-once: replaying over jobs still in the queue duplicates them
    store.replay("q", 5)
    relay_all(store)
    store.replay("q", 5)
    relay_all(store)
    assert [job.position for job in drain(store, "q")] == [5, 5]

    # forward: skips what lies before the position
    append(store, OrderCreated(order_id=6), OrderCreated(order_id=7))
    store.replay("q", 8)
    relay_all(store)
    assert drain(store, "q") == []
    assert checkpoints(store) == {"other": 7, "q": 7}


def test_invalid_replay_arguments_raise_typed_errors(store: alkstore.Store) -> None:
    store.subscribe("q", ["*"], start="beginning")
    append(store, OrderCreated(order_id=1))
    relay_all(store)
    for position in (0, -1, True, 2.0, "1", None):
        with pytest.raises(alkstore.InvalidArgument, match="from_position"):
            store.replay("q", position)  # type: ignore[arg-type]
    with pytest.raises(alkstore.InvalidArgument, match="no subscription for queue 'nope'"):
        store.replay("nope", 1)
    assert checkpoints(store) == {"q": 1}
    assert relay_all(store) == (0, 0)


# -- concurrency with a batch in flight --------------------------------------------------------


@contextmanager
def batch_paused_before_advance(store: alkstore.Store) -> Iterator[threading.Event]:
    """Run one relay batch in a thread, paused after its jobs are inserted and before the
    checkpoints advance; yields once it is paused, lets it finish at exit."""
    engine: Any = store.engine
    original = engine.run_in
    paused, resume = threading.Event(), threading.Event()

    def run_in(conn: Any, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if name == "relay_advance" and threading.current_thread().name == "paused-batch":
            paused.set()
            resume.wait(30)
        result: list[tuple[Any, ...]] = original(conn, name, params)
        return result

    errors: list[BaseException] = []

    def batch() -> None:
        try:
            store.relay_batch()
        except BaseException as exc:
            errors.append(exc)

    engine.run_in = run_in
    thread = threading.Thread(target=batch, name="paused-batch")
    try:
        thread.start()
        assert paused.wait(30), "the batch never reached relay_advance"
        yield resume
    finally:
        resume.set()
        thread.join(30)
        del engine.run_in
    assert not errors, errors


def concurrently(call: Callable[[], object], resume: threading.Event) -> list[object]:
    """Start `call` in a thread; give it 0.5 s (it may block on the batch), then let the
    batch finish and wait for `call`."""
    results: list[object] = []

    def target() -> None:
        try:
            results.append(call())
        except BaseException as exc:
            results.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(0.5)
    resume.set()
    thread.join(30)
    assert not thread.is_alive()
    return results


def test_a_replay_during_a_batch_is_not_overwritten(store: alkstore.Store) -> None:
    store.subscribe("q", ["*"], start="beginning")
    append(store, OrderCreated(order_id=1), OrderCreated(order_id=2))
    relay_all(store)
    drain(store, "q")
    append(store, OrderCreated(order_id=3))
    with batch_paused_before_advance(store) as resume:
        # the replay waits for the batch: it moves the checkpoint back from 3, not from 2
        replayed = alkstore.Replay("q", previous=3, checkpoint=0, redelivered=3, skipped=0)
        assert concurrently(lambda: store.replay("q", 1), resume) == [replayed]
    assert checkpoints(store) == {"q": 0}, "the batch overwrote the replayed checkpoint"
    relay_all(store)
    assert positions_in(store, "q") == [1, 2, 3, 3]


def test_an_unsubscribe_during_a_batch_sticks(store: alkstore.Store) -> None:
    store.subscribe("q", ["*"], start="beginning")
    append(store, OrderCreated(order_id=1))
    with batch_paused_before_advance(store) as resume:
        assert concurrently(lambda: store.unsubscribe("q"), resume) == [True]
    assert store.subscriptions() == []


def test_a_subscription_created_during_a_batch_gets_every_event(
    store: alkstore.Store, backend: Backend, request: pytest.FixtureRequest
) -> None:
    """subscribe(start="beginning") while a batch is in flight must not lose history."""
    store.subscribe("first", ["*"], start="beginning")
    append(store, OrderCreated(order_id=1), OrderCreated(order_id=2))
    with batch_paused_before_advance(store) as resume:
        (sub,) = concurrently(lambda: store.subscribe("late", ["*"], start="beginning"), resume)
    assert isinstance(sub, alkstore.Subscription) and sub.checkpoint == 0
    relay_all(store)
    assert positions_in(store, "first") == [1, 2]
    assert positions_in(store, "late") == [1, 2], "the new subscription skipped its history"


# -- retention and status --------------------------------------------------------------------


def test_prune_log_never_deletes_past_the_slowest_checkpoint(backend: Backend) -> None:
    clock = Clock()
    store = backend.connect(clock=clock)
    try:
        store.migrate()
        append(store, *(OrderCreated(order_id=n) for n in range(1, 11)))
        clock.advance(3_600)
        assert store.prune_log(older_than=60) == 0, "no subscription: nothing may be pruned"

        store.subscribe("fast", ["*"], start="beginning")
        store.subscribe("slow", ["payment.*"], start="beginning")
        assert store.prune_log(older_than=60) == 0, "no subscription has relayed anything"
        relay_all(store)
        store.replay("slow", 5)  # the slowest subscription is now at 4

        assert store.prune_log(older_than=7_200) == 0, "younger than the cutoff"
        assert store.prune_log(older_than=60) == 4
        assert [e.position for e in store.log.read(limit=100)] == list(range(5, 11))
        assert store.prune_log(older_than=60) == 0
        assert store.log.head() == 10

        relay_all(store)  # slow catches up; only now can the rest go
        assert checkpoints(store) == {"fast": 10, "slow": 10}
        append(store, OrderCreated(order_id=11))  # not relayed: ahead of every checkpoint
        assert store.prune_log(older_than=3_700) == 0, "younger than the cutoff"
        assert store.prune_log(older_than=60) == 6
        assert [e.position for e in store.log.read(limit=100)] == [11]
        with pytest.raises(alkstore.InvalidArgument):
            store.prune_log(older_than=-1)
    finally:
        store.close()


def test_status_shows_head_and_lag_per_subscription(backend: Backend) -> None:
    clock = Clock()
    store = backend.connect(clock=clock)
    try:
        store.migrate()
        empty = store.status()
        assert (empty.head, empty.subscriptions) == (0, [])
        store.subscribe("all", ["*"], start="beginning")
        store.subscribe("orders", ["order.*"], start="beginning")
        append(store, OrderCreated(order_id=1), PaymentSettled(cents=1))
        append(store, OrderCreated(order_id=2))
        relay_all(store)
        store.subscribe("late", ["*"], start=2)
        store.replay("orders", 3)
        append(store, OrderCreated(order_id=4), OrderCreated(order_id=5))
        clock.now = round(time.time(), 3) + 100  # the store's now: 100 s after the appends

        status = store.status()
        assert status.head == 5
        assert status.holdups == []
        lags = {lag.queue: lag for lag in status.subscriptions}
        assert [lag.queue for lag in status.subscriptions] == ["all", "late", "orders"]
        assert (lags["all"].checkpoint, lags["all"].events) == (3, 2)
        assert (lags["late"].checkpoint, lags["late"].events) == (1, 4)
        assert (lags["orders"].checkpoint, lags["orders"].events) == (2, 3)
        for lag in lags.values():
            # the age of the oldest event not yet relayed, by the store's clock
            assert lag.seconds is not None and 99.9 <= lag.seconds <= 160, lag

        relay_all(store)
        caught_up = store.status()
        assert caught_up.head == 5
        assert [
            (lag.queue, lag.checkpoint, lag.events, lag.seconds) for lag in caught_up.subscriptions
        ] == [
            ("all", 5, 0, None),
            ("late", 5, 0, None),
            ("orders", 5, 0, None),
        ]
    finally:
        store.close()


def test_lag_after_a_replay_into_pruned_history_is_not_caught_up(backend: Backend) -> None:
    clock = Clock()
    store = backend.connect(clock=clock)
    try:
        store.migrate()
        store.subscribe("q", ["*"], start="beginning")
        append(store, *(OrderCreated(order_id=n) for n in range(1, 7)))
        relay_all(store)
        store.replay("q", 4)
        clock.advance(3_600)
        assert store.prune_log(older_than=60) == 3  # positions 1-3
        store.replay("q", 1)
        (lag,) = store.status().subscriptions
        assert lag.checkpoint == 0 and lag.events > 0
        assert lag.seconds is not None, "reported as caught up with 3 events not relayed"
    finally:
        store.close()


# -- the relay loop ---------------------------------------------------------------------------

PROMPT = 2.0  # seconds from commit to claimable: generous on a busy 2-core machine


def wait_for_job(store: alkstore.Store, queue: str, timeout: float) -> alkstore.Job[Any]:
    q = store.queue(queue)
    deadline = time.monotonic() + timeout
    while True:
        job = q.claim(visibility=600)
        if job is not None:
            return job
        assert time.monotonic() < deadline, f"no job in {queue!r} within {timeout} s"
        time.sleep(0.005)


def test_the_relay_loop_moves_new_events_into_queues_promptly(store: alkstore.Store) -> None:
    store.subscribe("q", ["order.*"])
    store.subscribe("audit", ["*"])
    with running_relay(store, lease_ttl=1.0) as loop:
        latencies = []
        for n in range(1, 6):
            append(store, OrderCreated(order_id=n), key=f"order-{n}")
            committed = time.monotonic()
            job = wait_for_job(store, "q", timeout=30)
            latencies.append(time.monotonic() - committed)
            assert job.payload == OrderCreated(order_id=n) and job.key == f"order-{n}"
            job.ack()
            time.sleep(0.05)
        append(store, PaymentSettled(cents=1))
        wait_until(lambda: store.queue("audit").stats().ready == 6, 30, "the audit jobs")
        assert loop.is_leader
    print(f"commit-to-claimable latencies: {[round(x, 3) for x in latencies]}")
    assert max(latencies) < PROMPT, latencies
    assert store.queue("q").stats().ready == 0
    assert [job.position for job in drain(store, "audit")] == [1, 2, 3, 4, 5, 6]
    # a stopped relay releases its lease: another can take over at once
    assert store.lease("relay", 1.0).acquire()


def test_the_relay_loop_is_woken_by_commits_not_by_its_poll(store: alkstore.Store) -> None:
    """With a 10 s poll, only the wake can make jobs appear within PROMPT."""
    store.subscribe("q", ["*"])
    with running_relay(store, lease_ttl=30.0, poll=30.0) as loop:
        assert loop.poll == 10.0
        latencies = []
        for n in range(1, 4):
            time.sleep(0.3)  # let the loop settle into its wait
            append(store, OrderCreated(order_id=n))
            committed = time.monotonic()
            job = wait_for_job(store, "q", timeout=30)
            latencies.append(time.monotonic() - committed)
            assert job.payload == OrderCreated(order_id=n)
    print(f"commit-to-claimable latencies: {[round(x, 3) for x in latencies]}")
    assert max(latencies) < PROMPT, latencies


def test_a_new_subscription_wakes_the_relay(store: alkstore.Store) -> None:
    append(store, OrderCreated(order_id=1))
    with running_relay(store, lease_ttl=30.0, poll=30.0):
        time.sleep(0.3)
        store.subscribe("q", ["*"], start="beginning")
        subscribed = time.monotonic()
        job = wait_for_job(store, "q", timeout=30)
        latency = time.monotonic() - subscribed
    assert job.position == 1
    assert latency < PROMPT, latency


def test_concurrent_batches_without_a_lease_still_relay_each_event_once(
    store: alkstore.Store,
) -> None:
    """The lease picks one relay; the batch itself must not duplicate even when two run."""
    store.subscribe("all", ["*"], start="beginning")
    store.subscribe("orders", ["order.*"], start="beginning")
    writing = threading.Event()
    writing.set()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for n in range(150):
                event = OrderCreated(order_id=n) if n % 3 else PaymentSettled(cents=w)
                append(store, event)
        except BaseException as exc:
            errors.append(exc)

    def relayer() -> None:
        try:
            while writing.is_set():
                store.relay_batch(None, batch=7)
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    relayers = [threading.Thread(target=relayer) for _ in range(3)]
    for thread in writers + relayers:
        thread.start()
    for thread in writers:
        thread.join(60)
    writing.clear()
    for thread in relayers:
        thread.join(60)
    assert not errors, errors
    relay_all(store)
    head = store.log.head()
    assert head == 300
    entries = store.log.read(limit=1_000)
    assert positions_in(store, "all") == list(range(1, head + 1))
    orders = [e.position for e in entries if e.type == "order.created"]
    assert positions_in(store, "orders") == orders


def test_stopping_an_idle_relay_is_prompt(store: alkstore.Store) -> None:
    loop = relay.Relay(store, lease_ttl=30.0, poll=30.0)
    thread = threading.Thread(target=loop.run, name="idle-relay", daemon=True)
    thread.start()
    try:
        wait_until(lambda: loop.is_leader, 15, "the relay to take the lease")
        time.sleep(1.0)  # idle: in its 10 s wait
        stopping = time.monotonic()
        loop.stop()
        thread.join(timeout=PROMPT)
        took = time.monotonic() - stopping
        assert not thread.is_alive(), f"still running {took:.1f} s after stop()"
    finally:
        loop.stop()
        store.engine.wake.fire()
        thread.join(timeout=30)


def test_a_subscription_says_how_its_jobs_take_their_key(store: alkstore.Store) -> None:
    """dedupe / replace / debounce by key (docs/adr/0022) as `subscribe` was given them,
    in what it returns and in `subscriptions()`; subscribing again changes them."""
    made = [
        store.subscribe("first", ["order.*"], dedupe_by_key=True),
        store.subscribe("latest", ["order.*"], replace_by_key=True),
        store.subscribe("quiet", ["order.*"], debounce_by_key=2.5),
        store.subscribe("plain", ["order.*"]),
    ]
    keyed = [(s.queue, s.dedupe_by_key, s.replace_by_key, s.debounce_by_key) for s in made]
    assert keyed == [
        ("first", True, False, None),
        ("latest", False, True, None),
        ("quiet", False, False, 2.5),
        ("plain", False, False, None),
    ]
    assert {s.queue: s for s in store.subscriptions()} == {s.queue: s for s in made}
    again = store.subscribe("quiet", ["order.*"], replace_by_key=True)
    assert (again.replace_by_key, again.debounce_by_key) == (True, None)
    [listed] = [s for s in store.subscriptions() if s.queue == "quiet"]
    assert listed == again
