"""The relay's sink loop: every sink subscription, a batch at a time (docs/adr/0026).

For each running sink subscription: read the next batch under the relay's lease
(fenced), publish it within half the lease's time to live, and advance the checkpoint
(fenced again, and only from where the batch was read) to the end of the batch once
every message is confirmed, or to just before the first message that was not. A
failure worth retrying closes the connection and waits (tenacity's random exponential
backoff, up to `max_backoff` seconds) while the other subscriptions go on; a
permanent refusal parks the subscription at that message: nothing is skipped.
The clients run on one asyncio loop in a thread of their own, so their heartbeats are
answered between batches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import tenacity

import alkstore
from relay.sinks import _base

log = logging.getLogger("alkstore.relay.sinks")
LOOK_EVERY = 1.0  # seconds between looks for sink subscriptions while there are none
READ_AHEAD = 8  # batches of one subscription per step, each read while the last publishes
T = TypeVar("T")
_CLIENTS = {  # scheme -> (module, class, extra)
    "redis": ("relay.sinks._redis", "RedisSink", "redis"),
    "rediss": ("relay.sinks._redis", "RedisSink", "redis"),
    "nats": ("relay.sinks._nats", "NatsSink", "nats"),
    "amqp": ("relay.sinks._rabbitmq", "RabbitSink", "rabbitmq"),
    "amqps": ("relay.sinks._rabbitmq", "RabbitSink", "rabbitmq"),
}


class ClientMissing(_base.SinkError):
    """The broker's client is not installed in this Python (a permanent SinkError)."""


def knows(url: str) -> bool:
    """Whether the URL's scheme names a broker this relay has a sink for."""
    return url.split("://", 1)[0] in _CLIENTS and "://" in url


def open_sink(sub: alkstore.SinkSubscription, namespace: str) -> _base.Sink:
    """The sink for a subscription (not connected). SinkError, permanent, if its client is
    not installed (ClientMissing) or an option is wrong."""
    scheme = sub.sink.split("://", 1)[0]
    if scheme not in _CLIENTS:
        raise _base.rejected(f"no sink for {scheme}:// in this relay", 0)
    module, cls, extra = _CLIENTS[scheme]
    try:
        found = getattr(__import__(module, fromlist=[cls]), cls)
    except ImportError as exc:
        text = f"this relay cannot load the {scheme} client ({exc})"
        text += f": pip install 'alkstore[{extra}]'"
        raise ClientMissing(text, confirmed=0, permanent=True) from exc
    sink: _base.Sink = found(sub.sink, sub.options, namespace, sub.name)
    return sink


class SinkLoop:
    def __init__(
        self,
        store: alkstore.Store,
        lease: alkstore.Lease,
        *,
        batch: int = 1_000,
        max_backoff: float = 30.0,
    ) -> None:
        self.feed = store.sink_feed()
        self.namespace = store.namespace
        self.lease = lease
        self.batch = batch
        self.budget = lease.ttl_ms / 2000  # seconds a batch may take to publish
        self._backoff = tenacity.wait_random_exponential(multiplier=0.1, max=max_backoff)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._open: dict[str, tuple[str, dict[str, Any], _base.Sink]] = {}
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._known: list[alkstore.SinkSubscription] = []
        self._turn = random.randrange(1_000)  # relays restarted in a row start elsewhere
        self._next_look = 0.0
        self.published = 0  # messages the brokers confirmed
        self.duplicates = 0  # of those, dropped by the broker as already there
        self.retries = 0  # batches that failed and wait for a retry

    def step(self) -> bool:
        """One batch per running sink subscription; True if one may have more to do.
        NotLeader (from the fenced reads and writes) propagates."""
        subs = self._subscriptions()
        running = {s.name: s for s in subs if s.parked is None}
        for name, (url, options, _) in list(self._open.items()):
            sub = running.get(name)
            if sub is None or (sub.sink, sub.options) != (url, options):
                self._close(name)
        busy = False
        now = time.monotonic()
        order = list(running.values())
        self._turn = (self._turn + 1) % max(len(order), 1)  # each goes first in turn
        for sub in order[self._turn :] + order[: self._turn]:
            if now >= self._retry_at.get(sub.name, 0.0):
                busy = self._step(sub) or busy
        return busy

    def _subscriptions(self) -> list[alkstore.SinkSubscription]:
        """The sink subscriptions, read every step while there are any; a relay without
        any looks once a second (a new one starts within a second; the queue relay's
        batches pay no query for sinks they do not have)."""
        now = time.monotonic()
        if self._known or now >= self._next_look:
            self._known = self.feed.subscriptions()
            self._next_look = now + LOOK_EVERY
        return self._known

    def _step(self, sub: alkstore.SinkSubscription) -> bool:
        """Up to READ_AHEAD batches of one subscription: the next batch is read and its
        messages built while the broker confirms the one before (its client's loop
        thread is then mostly waiting); it is published only once that one is
        confirmed and its checkpoint moved, so the order holds."""
        started = time.monotonic()
        batch = self.feed.batch(self.lease, sub.name, self.batch)
        messages = self._messages(batch)
        for _ in range(READ_AHEAD):
            if batch.high <= batch.low:
                return False
            full = batch.high - batch.low >= self.batch
            if not batch.events:  # nothing it subscribes to: pass the range
                if not self.feed.advance(self.lease, sub.name, batch.low, batch.high):
                    return True  # moved meanwhile (a replay): read again
                if not full:
                    return False
                started = time.monotonic()
                batch = self.feed.batch(self.lease, sub.name, self.batch, after=batch.high)
                messages = self._messages(batch)
                continue
            try:
                sink = self._sink(sub)
                budget = self.budget - (time.monotonic() - started)
                if budget <= 0:
                    raise _base.unavailable(TimeoutError("the lease's time ran out"))
                sending = self._submit(sink.publish(messages, budget))
                following = None
                if full:  # read the next batch meanwhile (fenced like any read)
                    read_at = time.monotonic()
                    ahead = self.feed.batch(self.lease, sub.name, self.batch, after=batch.high)
                    following = (read_at, ahead, self._messages(ahead))
                dups = self._wait(sending, budget - (time.monotonic() - started) + 1.0)
            except _base.SinkError as exc:
                self._failed(sub, batch, messages, exc)
                return False
            except alkstore.AlkstoreError:
                raise  # NotLeader, a database error: the relay's loop handles those
            except Exception as exc:  # a client's own failure: retried, never skipped
                log.exception("sink %r: unexpected error", sub.name)
                self._failed(sub, batch, messages, _base.unavailable(exc))
                return False
            self.published += len(messages)
            self.duplicates += dups
            self._failures.pop(sub.name, None)
            self._retry_at.pop(sub.name, None)
            if not self.feed.advance(self.lease, sub.name, batch.low, batch.high):
                return True  # moved meanwhile (a replay): read again
            if following is None:
                return False
            started, batch, messages = following
        return True

    def _messages(self, batch: alkstore.SinkBatch) -> list[_base.Message]:
        namespace = self.namespace
        return [_base.envelope(namespace, event) for event in batch.events]

    def _failed(
        self,
        sub: alkstore.SinkSubscription,
        batch: alkstore.SinkBatch,
        messages: list[_base.Message],
        exc: _base.SinkError,
    ) -> None:
        self._close(sub.name)
        done = min(max(exc.confirmed, 0), len(messages))
        self.published += done
        if done:  # everything before the first unconfirmed message is delivered
            self.feed.advance(
                self.lease,
                sub.name,
                batch.low,
                messages[done].position - 1 if done < len(messages) else batch.high,
            )
        if done == len(messages):
            return
        failed = messages[done]
        if exc.permanent:
            reason = f"position {failed.position} ({failed.type}): {exc.reason}"
            log.error("sink %r parked at %s", sub.name, reason)
            self.feed.park(self.lease, sub.name, reason)
            return
        self.retries += 1
        n = self._failures.get(sub.name, 0) + 1
        self._failures[sub.name] = n
        state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
        state.attempt_number = n
        delay = self._backoff(state)
        self._retry_at[sub.name] = time.monotonic() + delay
        log.warning(
            "sink %r (%s): %s; %d events wait at position %d, retrying in %.1fs",
            sub.name,
            sub.sink,
            exc.reason,
            len(messages) - done,
            failed.position,
            delay,
        )

    def _sink(self, sub: alkstore.SinkSubscription) -> _base.Sink:
        found = self._open.get(sub.name)
        if found is not None:
            return found[2]
        sink = open_sink(sub, self.namespace)
        self._run(sink.connect(), self.budget + 1.0)
        self._open[sub.name] = (sub.sink, sub.options, sink)
        return sink

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return self._wait(self._submit(coro), timeout)

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="alkstore-sinks", daemon=True
            )
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _wait(self, future: concurrent.futures.Future[T], timeout: float) -> T:
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise _base.unavailable(TimeoutError(f"no answer within {timeout:.1f}s")) from exc

    def _close(self, name: str) -> None:
        found = self._open.pop(name, None)
        if found is not None and self._loop is not None:
            try:
                self._run(found[2].close(), 5.0)
            except _base.SinkError:
                log.warning("sink %r: closing its connection timed out", name)

    def close(self) -> None:
        for name in list(self._open):
            self._close(name)
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            if not loop.is_running():
                loop.close()
