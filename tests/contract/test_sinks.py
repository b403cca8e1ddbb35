"""Broker sinks on both engines, against the real local brokers (docs/adr/0026).

Exactly the committed events arrive, in log order, with the envelope; a replay is
dropped as duplicates by the brokers that deduplicate; an injected publish failure
after k confirmed messages leaves the checkpoint just before message k+1 (shown as
lag), and the retry delivers the rest once; a message the broker refuses parks the
subscription there (shown by status) until it is resumed. A sink subscription makes
no jobs and is no queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

import alkstore
import relay
from relay.sinks import _base
from tests import brokers
from tests.contract.test_metrics import serving, until
from tests.events import Basket, OrderPlaced
from tests.metrics_support import value
from tests.sink_targets import Target, target

KINDS = ["redis", "nats", "rabbitmq"]


@pytest.fixture(params=KINDS)
def dest(request: pytest.FixtureRequest) -> Iterator[Target]:
    with target(request.param) as made:
        yield made


def _append(store: alkstore.Store, n: int, start: int = 0) -> None:
    """n events over three keys, a few per transaction, one transaction rolled back."""
    for i in range(start, start + n, 4):
        with store.transaction() as tx:
            for j in range(i, min(i + 4, start + n)):
                tx.append(
                    OrderPlaced(order_id=j), key=f"k{j % 3}", headers={"traceparent": f"t{j}"}
                )
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.append(OrderPlaced(order_id=-1), key="k0")
        raise RuntimeError("rolled back")


def _drain(r: relay.Relay, store: alkstore.Store, name: str, timeout: float = 10) -> None:
    def caught_up() -> bool:
        r.step()
        (sub,) = [s for s in store.sink_subscriptions() if s.name == name]
        return sub.checkpoint == store.log.head()

    brokers.wait_until(caught_up, timeout, f"sink {name} catching up")


def _ids(got: list[Any]) -> list[int]:
    return [g.position for g in got]


def test_a_sink_subscription_is_no_queue(store: alkstore.Store) -> None:
    sub = store.subscribe_sink("feed", "redis://127.0.0.1:6379/0", ["test.*"], stream="s-{type}")
    assert (sub.name, sub.events, sub.options, sub.checkpoint) == (
        "feed",
        ["test.*"],
        {"stream": "s-{type}"},
        0,
    )
    store.subscribe("jobs", ["test.*"])
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
    assert store.relay_batch() == (1, 1)  # one job, for the queue subscription only
    assert [s.queue for s in store.subscriptions()] == ["jobs"]
    assert [s.name for s in store.sink_subscriptions()] == ["feed"]
    state = store.status()
    assert [q.name for q in state.queues] == ["jobs"]
    (lag,) = [lag for lag in state.subscriptions if lag.queue == "feed"]
    assert (lag.sink, lag.events, lag.parked) == ("redis://127.0.0.1:6379/0", 1, None)
    with pytest.raises(alkstore.InvalidArgument, match="sink subscription"):
        store.subscribe("feed", ["*"])
    with pytest.raises(alkstore.InvalidArgument, match="queue subscription"):
        store.subscribe_sink("jobs", "nats://127.0.0.1:4222", ["*"])
    with pytest.raises(alkstore.InvalidArgument, match="invalid sink"):
        store.subscribe_sink("x", "kafka://127.0.0.1:9092", ["*"])
    with pytest.raises(alkstore.InvalidArgument, match=r"\{user\}"):
        store.subscribe_sink("x", "nats://127.0.0.1:4222", ["*"], subject="a.{user}")
    again = store.subscribe_sink("feed", "redis://127.0.0.1:6379/0", ["*"], stream="s")
    assert (again.events, again.checkpoint) == (["*"], 0), "updated, checkpoint kept"
    assert store.unsubscribe("feed") and store.sink_subscriptions() == []


def test_exactly_the_committed_events_arrive_in_order(store: alkstore.Store, dest: Target) -> None:
    with store.transaction() as tx:
        tx.append(Basket(items=[1]))  # before the subscription: not sent
    store.subscribe_sink("feed", dest.url, ["test.order*"], **dest.options)
    _append(store, 30)
    with store.transaction() as tx:
        tx.append(Basket(items=[2]), key="k0")  # not subscribed
    r = relay.Relay(store, lease_ttl=5, sink_batch=7)  # batches read ahead
    _drain(r, store, "feed")
    got = dest.received()
    log = [e for e in store.log.read(0, 1000) if e.type == "test.order_placed"]
    assert _ids(got) == [e.position for e in log]  # each once, in log order
    for g, e in zip(got, log, strict=True):
        assert (g.id, g.type, g.key) == (f"{store.namespace}:{e.position}", e.type, e.key)
        assert g.headers == {"traceparent": f"t{e.payload.order_id}"}  # type: ignore[attr-defined]
        assert msgspec.json.decode(g.body) == msgspec.json.decode(msgspec.json.encode(e.payload))
        assert g.appended_at.endswith("Z")
    # a replay publishes the same ids again: brokers that deduplicate drop them
    store.replay("feed", 1)
    _drain(r, store, "feed")
    again = dest.received()
    if dest.dedupes:
        assert again == got and r.sinks.duplicates == len(got)
    else:
        assert [g.id for g in again] == [g.id for g in got] * 2
    r.sinks.close()


def test_the_checkpoint_never_passes_an_unconfirmed_message(
    store: alkstore.Store, dest: Target
) -> None:
    store.subscribe_sink("feed", dest.url, ["test.*"], **dest.options)
    _append(store, 20)
    r = relay.Relay(store, lease_ttl=5, sink_batch=8)
    sink = r.sinks._sink(store.sink_subscriptions()[0])  # opened (and connected) here
    real = sink.publish
    calls, confirmed = [], 3

    async def fail_in_the_second_batch(messages: Any, timeout: float) -> int:
        calls.append(len(messages))
        if len(calls) == 1:
            return await real(messages, timeout)
        await real(messages[:confirmed], timeout)  # really published and confirmed
        raise _base.SinkError("injected: connection lost", confirmed=confirmed, permanent=False)

    sink.publish = fail_in_the_second_batch  # type: ignore[method-assign]
    r.step()
    assert calls == [8, 8], "the second batch (read ahead) was published after the first"
    positions = [e.position for e in store.log.read(0, 1000)]
    (sub,) = store.sink_subscriptions()
    assert sub.checkpoint == positions[8 + confirmed] - 1, "up to the last confirmed message"
    (lag,) = store.status().subscriptions
    assert lag.events == store.log.head() - sub.checkpoint and lag.parked is None
    assert r.sinks.retries == 1
    r.sinks._retry_at.clear()  # skip the backoff: the failed connection was dropped
    _drain(r, store, "feed")
    assert _ids(dest.received()) == positions  # the rest once, in order
    r.sinks.close()


def test_a_refused_message_parks_the_subscription(store: alkstore.Store, dest: Target) -> None:
    store.subscribe_sink("feed", dest.url, ["test.*"], **dest.options)
    _append(store, 8)
    dest.refuse()
    r = relay.Relay(store, lease_ttl=5)
    r.step()
    (sub,) = store.sink_subscriptions()
    assert sub.checkpoint == 0 and sub.parked is not None and sub.parked_at is not None
    assert sub.parked.startswith("position 1 (test.order_placed): ")
    (lag,) = store.status().subscriptions
    assert lag.parked == sub.parked and lag.events == 8
    r.step()
    assert store.sink_subscriptions()[0].checkpoint == 0, "parked: nothing moves, nothing skipped"
    dest.accept()
    assert store.resume_sink("feed") and not store.resume_sink("nothing")
    _drain(r, store, "feed")
    assert _ids(dest.received()) == [e.position for e in store.log.read(0, 100)]
    r.sinks.close()


def test_a_stale_relay_publishes_nothing(store: alkstore.Store) -> None:
    """Fencing as for queue subscriptions: a relay whose lease was taken over reads no
    batch and moves no checkpoint (NotLeader), so it publishes nothing."""
    with target("redis") as dest:
        store.subscribe_sink("feed", dest.url, ["test.*"], **dest.options)
        _append(store, 4)
        stale = relay.Relay(store, lease_ttl=0.2)
        assert stale.step() is False and stale.is_leader
        assert [g.position for g in dest.received()] == [1, 2, 3, 4]
        time.sleep(0.3)  # its lease runs out (paused, cut off)
        live = relay.Relay(store, lease_ttl=5)
        assert live.lease.acquire()  # another relay took over
        _append(store, 4, start=4)
        with pytest.raises(alkstore.NotLeader):
            stale.sinks.step()  # it still believes it leads
        assert len(dest.received()) == 4 and store.sink_subscriptions()[0].checkpoint == 4
        _drain(live, store, "feed")
        assert [g.position for g in dest.received()] == list(range(1, 9))
        stale.sinks.close()
        live.sinks.close()


def test_sink_metrics_count_published_messages_and_show_a_parked_sink(
    store: alkstore.Store,
) -> None:
    ns = store.namespace
    with target("redis") as dest, serving([store]) as server:
        store.subscribe_sink("feed", dest.url, ["test.*"], **dest.options)
        _append(store, 8)
        dest.refuse()
        r = relay.Relay(store, lease_ttl=5)
        r.step()
        parked = until(
            server,
            lambda s: value(s, "alkstore_sink_parked", namespace=ns, queue="feed") == 1,
            "the parked sink sampled",
        )
        assert value(parked, "alkstore_relay_lag_events", namespace=ns, queue="feed") == 8
        ready = value(parked, "alkstore_queue_jobs", namespace=ns, queue="feed", state="ready")
        assert ready is None, "a sink is no queue"
        dest.accept()
        store.resume_sink("feed")
        _drain(r, store, "feed")
        after = until(
            server,
            lambda s: value(s, "alkstore_sink_parked", namespace=ns, queue="feed") == 0,
            "the resumed sink sampled",
        )
        assert value(after, "alkstore_sink_messages_published_total", namespace=ns) == 8
        assert value(after, "alkstore_sink_duplicates_dropped_total", namespace=ns) == 0
        assert value(after, "alkstore_sink_publish_failures_total", namespace=ns) == 0
        r.sinks.close()
        r.lease.release()
