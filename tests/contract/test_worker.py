"""The worker runtime (ADR 0008) on both engines, in-process.

Each test builds a `relay.Worker` on the test's store and either drains with
`run(once=True)` or runs it in a thread and `stop()`s it. Workers use a short `poll`
(their stop latency, see `test_stop_is_prompt_when_idle`) unless the test is about
the poll. Timing assertions are one-sided and generous: the machine is shared.

The last section holds regression tests for bugs found while writing this file.
"""

from __future__ import annotations

import asyncio
import logging
import queue as stdlib_queue
import threading
import time
from collections import Counter
from typing import Any

import pytest

import alkstore
import relay
from tests.conftest import Backend
from tests.events import Basket, OrderPlaced
from tests.worker_support import (
    JOIN,
    POLL,
    Gauge,
    corrupt,
    drain,
    empty,
    running,
    wait_until,
)

# -- typed payloads and poison ------------------------------------------------------------


def test_handlers_get_the_payload_decoded_as_annotated(store: alkstore.Store) -> None:
    worker = relay.Worker(store, poll=POLL)
    orders: list[OrderPlaced] = []
    counts: list[dict[str, int]] = []
    untyped: list[Any] = []

    @worker.handler("orders")
    def on_order(job: alkstore.Job[OrderPlaced]) -> None:
        orders.append(job.payload)

    @worker.handler("counts")
    def on_counts(job: alkstore.Job[dict[str, int]]) -> None:
        counts.append(job.payload)

    @worker.handler("anything")
    def on_anything(job: alkstore.Job[Any]) -> None:
        untyped.append(job.payload)

    store.queue("orders").enqueue(OrderPlaced(order_id=1, total_cents=250))
    store.queue("orders").enqueue({"order_id": 2, "total_cents": 7})  # a plain dict that fits
    store.queue("orders").enqueue({"order_id": 3})  # field defaults apply
    store.queue("counts").enqueue({"a": 1, "b": 2})
    store.queue("anything").enqueue(OrderPlaced(order_id=4))
    store.queue("anything").enqueue([1, "two"])
    drain(worker)

    assert sorted(orders, key=lambda o: o.order_id) == [
        OrderPlaced(order_id=1, total_cents=250),
        OrderPlaced(order_id=2, total_cents=7),
        OrderPlaced(order_id=3, total_cents=0),
    ]
    assert all(type(o) is OrderPlaced for o in orders)
    assert counts == [{"a": 1, "b": 2}] and type(counts[0]) is dict
    assert sorted(map(repr, untyped)) == sorted(map(repr, [OrderPlaced(order_id=4), [1, "two"]]))
    assert worker.counters["ack"] == 6 and worker.counters["claimed"] == 6
    for name in ("orders", "counts", "anything"):
        assert empty(store.queue(name)), name


def test_poison_payloads_are_dead_lettered_at_once(store: alkstore.Store, backend: Backend) -> None:
    worker = relay.Worker(store, poll=POLL, unknown_type_grace=0)  # unknown types too
    handled: list[int] = []

    @worker.handler("orders", concurrency=1)  # one at a time: the next job after each poison
    def on_order(job: alkstore.Job[OrderPlaced]) -> None:
        handled.append(job.payload.order_id)

    @worker.handler("counts", concurrency=1)
    def on_counts(job: alkstore.Job[dict[str, int]]) -> None:
        handled.append(job.payload["a"])

    @worker.handler("untyped", concurrency=1)
    def on_untyped(job: alkstore.Job[Any]) -> None:
        handled.append(job.id)

    orders, counts, untyped = store.queue("orders"), store.queue("counts"), store.queue("untyped")
    plain_bad = orders.enqueue({"order_id": "seven"})
    wrong_event = orders.enqueue(Basket(items=[1]))
    unknown = orders.enqueue(OrderPlaced(order_id=0))
    corrupt(backend, unknown, "test.no_such_event", '{"order_id": 0}')
    event_bad = orders.enqueue(OrderPlaced(order_id=0))
    corrupt(backend, event_bad, "test.order_placed", '{"order_id": "x"}')
    orders.enqueue(OrderPlaced(order_id=100))
    counts_bad = counts.enqueue({"a": "not a number"})
    counts.enqueue({"a": 200})
    untyped_unknown = untyped.enqueue(OrderPlaced(order_id=0))
    corrupt(backend, untyped_unknown, "test.no_such_event", "{}")
    untyped_ok = untyped.enqueue({"fine": True})
    drain(worker)

    assert sorted(handled) == sorted([100, 200, untyped_ok]), "the good jobs after the poison"
    dead = {d.id: d for q in (orders, counts, untyped) for d in q.dead_letters()}
    expected = {
        plain_bad: ["Expected `int`, got `str` - at `$.order_id`"],
        wrong_event: ["the handler expects OrderPlaced"],
        unknown: ["unknown event type 'test.no_such_event'"],
        event_bad: ["Expected `int`, got `str` - at `$.order_id`"],
        counts_bad: ["Expected `int`, got `str` - at `$[...]`"],  # msgspec's path for dict values
        untyped_unknown: ["unknown event type 'test.no_such_event'"],
    }
    assert sorted(dead) == sorted(expected)
    for job_id, fragments in expected.items():
        letter = dead[job_id]
        assert letter.reason.startswith("payload does not decode: "), letter.reason
        for fragment in fragments:
            assert fragment in letter.reason, (job_id, letter.reason)
        assert letter.attempts == 1, "a poison job is never retried"
        assert [(a.attempt, a.error) for a in letter.history] == [(1, letter.reason)]
    assert worker.counters["poison"] == 6
    assert worker.counters["ack"] == 3
    assert worker.counters["retry"] == 0 and worker.counters["fail"] == 0
    for q in (orders, counts, untyped):
        assert q.stats().ready == q.stats().active == q.stats().scheduled == 0


# -- outcomes: exceptions, Retry, Fail ------------------------------------------------------


class CardDeclined(Exception):
    pass


def test_handler_exception_retries_with_type_and_text_in_the_history(
    store: alkstore.Store,
) -> None:
    q = store.queue("flaky")
    q.configure(max_attempts=3, backoff=alkstore.Fixed(delay=0))
    worker = relay.Worker(store, poll=POLL)
    attempts: list[int] = []

    @worker.handler("flaky")
    def flaky(job: alkstore.Job[dict[str, int]]) -> None:
        attempts.append(job.attempt)
        raise CardDeclined(f"card {job.payload['card']} declined on attempt {job.attempt}")

    job_id = q.enqueue({"card": 42})
    drain(worker)

    assert attempts == [1, 2, 3]
    [letter] = q.dead_letters()
    assert letter.id == job_id and letter.attempts == 3
    assert [(a.attempt, a.error) for a in letter.history] == [
        (n, f"CardDeclined: card 42 declined on attempt {n}") for n in (1, 2, 3)
    ]
    assert letter.reason == "CardDeclined: card 42 declined on attempt 3"
    # every failing attempt counts as a retry; the last one also as "dead"
    assert worker.counters["retry"] == 3 and worker.counters["dead"] == 1
    assert worker.counters["ack"] == 0
    assert q.stats().dead == 1 and q.stats().ready == 0


def test_retry_with_a_delay_and_fail_with_a_reason(store: alkstore.Store) -> None:
    q = store.queue("control")
    worker = relay.Worker(store, poll=POLL)

    @worker.handler("control")
    def control(job: alkstore.Job[dict[str, str]]) -> None:
        action = job.payload["do"]
        if action == "later":
            if job.attempt == 1:
                raise relay.Retry(delay=0.5, reason="not yet")
            raise relay.Fail(f"gave up on attempt {job.attempt}")
        if action == "fail":
            raise relay.Fail("no such customer")
        if action == "park":
            raise relay.Retry(delay=600)

    later = q.enqueue({"do": "later"})
    fail = q.enqueue({"do": "fail"})
    park = q.enqueue({"do": "park"})
    with running(worker):
        wait_until(lambda: q.stats().dead == 2 and q.stats().scheduled == 1, "2 dead, 1 parked")

    dead = {d.id: d for d in q.dead_letters()}
    assert sorted(dead) == sorted([later, fail]) and park not in dead
    # Retry(delay=0.5): the second attempt ran at least 0.5 s after the first ended.
    assert dead[later].attempts == 2
    assert [(a.attempt, a.error) for a in dead[later].history] == [
        (1, "not yet"),
        (2, "gave up on attempt 2"),
    ]
    assert dead[later].history[1].at - dead[later].history[0].at >= 500
    # Fail: dead-lettered on its first attempt although max_attempts is 5.
    assert dead[fail].reason == "no such customer" and dead[fail].attempts == 1
    assert [(a.attempt, a.error) for a in dead[fail].history] == [(1, "no such customer")]
    assert q.stats() == alkstore.QueueStats(0, 1, 0, 2, None)  # park waits its 600 s
    assert worker.counters["retry"] == 2 and worker.counters["fail"] == 2


# -- sync and async, concurrency ------------------------------------------------------------


def test_sync_and_async_handlers_respect_per_queue_concurrency(store: alkstore.Store) -> None:
    worker = relay.Worker(store, poll=POLL)
    sync_gauge, async_gauge = Gauge(), Gauge()
    sync_on_loop: list[bool] = []
    async_on_loop: list[bool] = []

    def on_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    @worker.handler("sync_jobs", concurrency=2)
    def sync_handler(job: alkstore.Job[int]) -> None:
        with sync_gauge:
            sync_on_loop.append(on_loop())
            time.sleep(0.2)

    @worker.handler("async_jobs", concurrency=3)
    async def async_handler(job: alkstore.Job[int]) -> None:
        with async_gauge:
            async_on_loop.append(on_loop())
            await asyncio.sleep(0.2)

    store.queue("sync_jobs").enqueue_many(range(10))
    store.queue("async_jobs").enqueue_many(range(12))
    drain(worker)

    assert (sync_gauge.total, async_gauge.total) == (10, 12)
    assert sync_gauge.peak == 2, "per-queue concurrency=2"
    assert async_gauge.peak == 3, "per-queue concurrency=3"
    assert sync_on_loop == [False] * 10 and async_on_loop == [True] * 12
    assert worker.counters["ack"] == 22
    assert empty(store.queue("sync_jobs")) and empty(store.queue("async_jobs"))


def test_total_concurrency_caps_all_queues_together(store: alkstore.Store) -> None:
    worker = relay.Worker(store, concurrency=3, poll=POLL)
    everything = Gauge()
    per_queue = {"sync_jobs": Gauge(), "async_jobs": Gauge()}

    @worker.handler("sync_jobs", concurrency=4)
    def sync_handler(job: alkstore.Job[int]) -> None:
        with everything, per_queue["sync_jobs"]:
            time.sleep(0.2)

    @worker.handler("async_jobs", concurrency=4)
    async def async_handler(job: alkstore.Job[int]) -> None:
        with everything, per_queue["async_jobs"]:
            await asyncio.sleep(0.2)

    store.queue("sync_jobs").enqueue_many(range(8))
    store.queue("async_jobs").enqueue_many(range(8))
    drain(worker)

    assert everything.total == 16 and all(g.total == 8 for g in per_queue.values())
    assert everything.peak == 3, "Worker(concurrency=3) across both queues"
    assert all(g.peak <= 3 for g in per_queue.values())
    assert worker.counters["ack"] == 16


def test_queues_sharing_a_smaller_total_take_turns(store: alkstore.Store) -> None:
    """When queues share a total smaller than their sum, a queue with a long backlog
    does not keep the slots until it is drained while the other one waits (ADR 0008)."""
    worker = relay.Worker(store, concurrency=1, poll=POLL)
    order: list[str] = []

    @worker.handler("backlog", concurrency=1)
    def slow(job: alkstore.Job[int]) -> None:
        order.append("backlog")
        time.sleep(0.02)

    @worker.handler("urgent", concurrency=1)
    def urgent(job: alkstore.Job[int]) -> None:
        order.append("urgent")

    store.queue("backlog").enqueue_many(range(40))
    store.queue("urgent").enqueue(1)
    drain(worker)

    assert len(order) == 41
    assert order.index("urgent") < 20, f"urgent ran only after {order.index('urgent')} jobs"


# -- lease renewal --------------------------------------------------------------------------

VISIBILITY = 1.0  # seconds
SLOW = 3.0  # seconds a slow handler runs: three leases


@pytest.mark.parametrize("renew", [True, False], ids=["renew", "no-renew"])
def test_a_slow_handler_keeps_its_lease_only_with_renewal(
    store: alkstore.Store, backend: Backend, renew: bool
) -> None:
    """A handler that runs 3 leases long while a thief keeps trying to claim the job.

    With renewal the thief never gets it and the worker acks it once; with
    renew=False the lease lapses, the job is claimed again (attempt 2, by the thief
    or by the worker's own dispatcher) and the first run's late ack is LeaseLost:
    the same test fails without renewal.
    """
    worker = relay.Worker(store, visibility=VISIBILITY, renew=renew, poll=POLL)
    runs: list[int] = []

    @worker.handler("slow")
    def slow(job: alkstore.Job[dict[str, int]]) -> None:
        runs.append(job.attempt)
        time.sleep(SLOW)

    job_id = store.queue("slow").enqueue({"n": 1})
    thief_store = backend.connect()
    stolen: list[alkstore.Job[Any]] = []
    stop_thief = threading.Event()

    def thief() -> None:
        q = thief_store.queue("slow")
        while not stop_thief.is_set():
            job = q.claim(visibility=120)
            if job is not None:
                stolen.append(job)
                return
            stop_thief.wait(0.05)

    thief_thread = threading.Thread(target=thief, name="thief", daemon=True)
    try:
        with running(worker):
            wait_until(lambda: bool(runs), "the worker to claim the job")
            thief_thread.start()
            wait_until(
                lambda: worker.counters["ack"] + worker.counters["lease_lost"] >= 1,
                "the handler's outcome",
            )
    finally:
        stop_thief.set()
        if thief_thread.ident is not None:
            thief_thread.join(JOIN)
        thief_store.close()

    deliveries = sorted(runs + [j.attempt for j in stolen])
    if renew:
        assert runs == [1] and stolen == [], f"re-delivered: worker {runs}, thief {stolen}"
        assert worker.counters["ack"] == 1 and worker.counters["lease_lost"] == 0
        assert empty(store.queue("slow"))
    else:
        # The lapsed lease hands the job out again, to the thief or to the worker itself.
        assert deliveries[:2] == [1, 2], f"not re-delivered: worker {runs}, thief {stolen}"
        assert all(j.id == job_id for j in stolen)
        assert worker.counters["lease_lost"] >= 1


# -- timeouts -------------------------------------------------------------------------------


def test_handler_timeout_fails_the_attempt(store: alkstore.Store) -> None:
    for name in ("sync_stuck", "async_stuck"):
        store.queue(name).configure(max_attempts=2, backoff=alkstore.Fixed(delay=0))
    worker = relay.Worker(store, poll=POLL, grace=5)
    unblock = threading.Event()
    fast_done: list[int] = []

    @worker.handler("sync_stuck", timeout=0.3)
    def sync_stuck(job: alkstore.Job[int]) -> None:
        unblock.wait(JOIN)  # a sync handler cannot be killed; it runs on

    @worker.handler("async_stuck", timeout=0.3)
    async def async_stuck(job: alkstore.Job[int]) -> None:
        await asyncio.sleep(JOIN)  # cancelled at the timeout

    @worker.handler("in_time", timeout=10)
    def in_time(job: alkstore.Job[int]) -> None:
        time.sleep(0.05)
        fast_done.append(job.payload)

    stuck = ("sync_stuck", "async_stuck")
    ids = {name: store.queue(name).enqueue(1) for name in stuck}
    store.queue("in_time").enqueue(7)
    with running(worker):
        try:
            wait_until(
                lambda: all(store.queue(n).stats().dead == 1 for n in stuck),
                "both stuck jobs to time out twice",
            )
            wait_until(lambda: fast_done == [7], "the job that finishes in time")
        finally:
            unblock.set()  # else the worker's stop waits its grace for the stuck thread
    for name in stuck:
        [letter] = store.queue(name).dead_letters()
        assert letter.id == ids[name] and letter.attempts == 2, name
        assert [(a.attempt, a.error) for a in letter.history] == [
            (1, "timed out after 0.3s"),
            (2, "timed out after 0.3s"),
        ], name
        assert letter.reason == "timed out after 0.3s"
    assert empty(store.queue("in_time"))


# -- wake-driven ----------------------------------------------------------------------------


def test_an_idle_worker_wakes_on_enqueue_without_waiting_for_its_poll(
    store: alkstore.Store,
) -> None:
    worker = relay.Worker(store, poll=5.0)
    started: stdlib_queue.Queue[float] = stdlib_queue.Queue()

    @worker.handler("wake")
    def on_wake(job: alkstore.Job[int]) -> None:
        started.put(time.monotonic())

    q = store.queue("wake")
    latencies = []
    with running(worker):
        time.sleep(1.0)  # the dispatcher found nothing and sleeps in its 5 s poll
        for n in range(3):
            before = time.monotonic()
            q.enqueue(n)
            latencies.append(started.get(timeout=JOIN) - before)
            time.sleep(0.3)
    assert max(latencies) < 1.0, f"enqueue -> handler latencies {latencies} (poll is 5 s)"
    assert worker.counters["ack"] == 3


# -- observability --------------------------------------------------------------------------


def test_on_outcome_and_counters_report_every_outcome(store: alkstore.Store) -> None:
    q = store.queue("mixed")
    q.configure(max_attempts=2, backoff=alkstore.Fixed(delay=0))
    lock = threading.Lock()
    outcomes: list[tuple[int, str, float]] = []

    def on_outcome(job: alkstore.Job[Any], outcome: str, seconds: float) -> None:
        with lock:
            outcomes.append((job.id, outcome, seconds))

    worker = relay.Worker(store, poll=POLL, on_outcome=on_outcome)

    @worker.handler("mixed")
    def mixed(job: alkstore.Job[dict[str, str]]) -> None:
        time.sleep(0.05)
        if job.payload["do"] == "fail":
            raise relay.Fail("refused")
        if job.payload["do"] == "flaky":
            raise RuntimeError("transient")

    ok = q.enqueue_many([{"do": "ok"}] * 3)
    fail = q.enqueue({"do": "fail"})
    flaky = q.enqueue({"do": "flaky"})
    poison = q.enqueue({"do": 5})  # not a dict[str, str]
    drain(worker)

    by_job: dict[int, list[str]] = {}
    for job_id, outcome, _ in outcomes:
        by_job.setdefault(job_id, []).append(outcome)
    assert by_job == {
        **{job_id: ["ack"] for job_id in ok if job_id is not None},
        fail: ["fail"],
        flaky: ["retry", "retry"],  # the second retry is the last attempt: dead-lettered
        poison: ["poison"],
    }
    for job_id, outcome, seconds in outcomes:
        assert seconds >= 0.0
        if outcome in ("fail", "retry"):
            assert seconds >= 0.05, (job_id, outcome, seconds)  # the handler's run time
    assert +worker.counters == Counter(claimed=7, ack=3, fail=1, retry=2, dead=1, poison=1)
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 3, None)


# -- regressions: bugs found while writing these tests, now fixed --------------------------


def test_leases_are_still_renewed_during_the_grace_period(
    store: alkstore.Store, backend: Backend
) -> None:
    worker = relay.Worker(store, visibility=VISIBILITY, grace=20, poll=POLL)
    runs: list[int] = []

    @worker.handler("slow")
    def slow(job: alkstore.Job[int]) -> None:
        runs.append(job.attempt)
        time.sleep(SLOW)

    store.queue("slow").enqueue(1)
    thief_store = backend.connect()
    stolen: list[alkstore.Job[Any]] = []
    try:
        with running(worker):
            wait_until(lambda: bool(runs), "the worker to claim the job")
            worker.stop()  # graceful: the job has `grace` (20 s) to finish, 3 s is enough
            deadline = time.monotonic() + SLOW + 1
            while time.monotonic() < deadline and not stolen:
                job = thief_store.queue("slow").claim(visibility=120)
                if job is not None:
                    stolen.append(job)
                time.sleep(0.05)
    finally:
        thief_store.close()
    assert stolen == [], "re-delivered during the grace period while its handler still ran"
    assert worker.counters["ack"] == 1 and worker.counters["lease_lost"] == 0


def test_on_outcome_reports_the_run_time_of_acked_jobs(store: alkstore.Store) -> None:
    seconds: list[float] = []
    worker = relay.Worker(store, poll=POLL, on_outcome=lambda job, kind, s: seconds.append(s))

    @worker.handler("timed")
    def timed(job: alkstore.Job[int]) -> None:
        time.sleep(0.2)

    store.queue("timed").enqueue(1)
    drain(worker)
    assert len(seconds) == 1 and seconds[0] >= 0.2, seconds


def test_a_raising_on_outcome_hook_does_not_stop_acks(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_errors: list[str] = []
    monkeypatch.setattr(
        threading,
        "excepthook",
        lambda args: thread_errors.append(f"{args.thread}: {args.exc_value!r}"),
    )

    def broken_hook(job: alkstore.Job[Any], outcome: str, seconds: float) -> None:
        raise RuntimeError("metrics exporter is down")

    worker = relay.Worker(store, poll=POLL, on_outcome=broken_hook)
    handled = Gauge()

    @worker.handler("jobs")
    def jobs(job: alkstore.Job[int]) -> None:
        with handled:
            pass

    q = store.queue("jobs")
    with running(worker):
        q.enqueue_many(range(5))
        wait_until(lambda: handled.total == 5, "the first 5 jobs")
        time.sleep(0.5)
        q.enqueue_many(range(5))
        wait_until(lambda: handled.total == 10, "the next 5 jobs")
        deadline = time.monotonic() + 2
        while not empty(q) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert thread_errors == []
    assert empty(q), f"jobs were handled but never acked: {q.stats()}"


def test_an_async_handler_raising_timeout_error_is_recorded_as_itself(
    store: alkstore.Store,
) -> None:
    q = store.queue("upstream")
    q.configure(max_attempts=1)
    worker = relay.Worker(store, poll=POLL)

    @worker.handler("upstream")
    async def call_upstream(job: alkstore.Job[int]) -> None:
        raise TimeoutError("the payment API did not answer")

    q.enqueue(1)
    drain(worker)
    [letter] = q.dead_letters()
    assert letter.reason == "TimeoutError: the payment API did not answer"


def test_timeouts_are_counted_and_reported_alike_for_sync_and_async(
    store: alkstore.Store,
) -> None:
    outcomes: list[tuple[str, str]] = []
    worker = relay.Worker(
        store,
        poll=POLL,
        grace=5,
        on_outcome=lambda job, kind, s: outcomes.append((job.queue, kind)),
    )
    unblock = threading.Event()

    @worker.handler("sync_stuck", timeout=0.2)
    def sync_stuck(job: alkstore.Job[int]) -> None:
        unblock.wait(JOIN)

    @worker.handler("async_stuck", timeout=0.2)
    async def async_stuck(job: alkstore.Job[int]) -> None:
        await asyncio.sleep(JOIN)

    for name in ("sync_stuck", "async_stuck"):
        store.queue(name).configure(max_attempts=1)
        store.queue(name).enqueue(1)
    with running(worker):
        try:
            wait_until(
                lambda: all(
                    store.queue(n).stats().dead == 1 for n in ("sync_stuck", "async_stuck")
                ),
                "both to time out",
            )
            time.sleep(0.2)
        finally:
            unblock.set()
    assert worker.counters["timeout"] == 2
    assert sorted(outcomes) == [("async_stuck", "timeout"), ("sync_stuck", "timeout")]


def test_stop_is_prompt_when_idle(store: alkstore.Store) -> None:
    worker = relay.Worker(store, poll=3.0)

    @worker.handler("idle")
    def idle(job: alkstore.Job[int]) -> None:
        pass

    with running(worker) as thread:
        time.sleep(0.5)  # the dispatcher sleeps in its 3 s poll
        asked = time.monotonic()
        worker.stop()
        thread.join(JOIN)
        took = time.monotonic() - asked
    assert took < 1.0, f"stop() of an idle worker took {took:.2f} s"


def test_an_unresolvable_payload_annotation_is_refused_at_registration(
    store: alkstore.Store,
) -> None:
    """Decided (ADR 0008 addendum 2026-12-01): the handler is refused when it is
    registered, with InvalidArgument naming it, and nothing is registered: a handler that
    cannot know its payload type never runs (never on an undecoded payload)."""

    class Local(alkstore.Event, tag="test.worker_local"):
        n: int

    worker = relay.Worker(store, poll=POLL)
    refused = r"cannot resolve the annotations of handler .*on_local.*Local"
    with pytest.raises(alkstore.InvalidArgument, match=refused):

        @worker.handler("local")
        def on_local(job: alkstore.Job[Local]) -> None:
            pass

    with pytest.raises(alkstore.InvalidArgument, match=refused.replace("on_local", "async_local")):

        @worker.handler("local")
        async def async_local(job: alkstore.Job[Local]) -> None:
            pass

    assert worker.handlers == {}


def test_a_worker_runs_again_after_run_returns(store: alkstore.Store) -> None:
    """Decided (ADR 0008 addendum 2026-12-01): run() may be called again once it has
    returned (a drain per cron tick, a restart after stop()); each run handles what is
    there then."""
    worker = relay.Worker(store, poll=POLL)
    handled: list[int] = []

    @worker.handler("again")
    def again(job: alkstore.Job[int]) -> None:
        handled.append(job.payload)

    q = store.queue("again")
    q.enqueue(1)
    drain(worker)
    q.enqueue(2)
    drain(worker)
    assert handled == [1, 2], f"the second run(once=True) handled {handled[1:]}"
    with running(worker):  # a long run, stopped, and a drain after it
        q.enqueue(3)
        wait_until(lambda: handled == [1, 2, 3], "the third job")
    q.enqueue(4)
    drain(worker)
    assert handled == [1, 2, 3, 4]
    assert empty(q)


def test_a_second_run_while_one_runs_is_refused(store: alkstore.Store) -> None:
    """Decided (ADR 0008 addendum 2026-12-01): one run() at a time per Worker; a second
    concurrent call raises at once and leaves the running one alone."""
    worker = relay.Worker(store, poll=POLL)
    handled: list[int] = []

    @worker.handler("single")
    def single(job: alkstore.Job[int]) -> None:
        handled.append(job.payload)

    q = store.queue("single")
    with running(worker):
        q.enqueue(1)
        wait_until(lambda: handled == [1], "the first job")
        with pytest.raises(alkstore.AlkstoreError, match="already running"):
            worker.run(once=True)
        q.enqueue(2)
        wait_until(lambda: handled == [1, 2], "a job after the refused run()")
    q.enqueue(3)
    drain(worker)
    assert handled == [1, 2, 3] and empty(q)


def test_per_job_log_records_carry_structured_fields(
    store: alkstore.Store, caplog: pytest.LogCaptureFixture
) -> None:
    q = store.queue("logged")
    q.configure(max_attempts=2, backoff=alkstore.Fixed(delay=0))
    worker = relay.Worker(store, poll=POLL)

    @worker.handler("logged")
    def boom(job: alkstore.Job[dict[str, int]]) -> None:
        raise CardDeclined("no")

    job_id = q.enqueue({"card": 1})
    with caplog.at_level(logging.DEBUG, logger="alkstore.worker"):
        drain(worker)
    fields = [r.alkstore for r in caplog.records if hasattr(r, "alkstore")]
    assert [(f["job_id"], f["attempt"], f["outcome"]) for f in fields] == [
        (job_id, 1, "retry"),
        (job_id, 2, "dead"),
    ]
    assert all(f["queue"] == "logged" and f["reason"] == "CardDeclined: no" for f in fields)
