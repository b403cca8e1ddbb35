"""What a worker holds, keyed by (job id, lease token), and its counters.

A job whose lease lapsed can be claimed again by the same worker: the two claims
are two entries with two tokens, so renewing, acking or dropping one never
touches the other (issue 12, item 2).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

import alkstore
from relay import _handlers
from relay.metrics._timings import Timings

Key = tuple[int, int]


def key(job: alkstore.Job[Any]) -> Key:
    return (job.id, job.lease_token)


class Running:
    """A held job: prefetched (started is None), in its handler, or done and waiting
    for its ack. The leases of all three are renewed. (A plain class with slots: one
    is made per claimed job.)"""

    __slots__ = (
        "abandoned",
        "finished",
        "handler",
        "job",
        "key",
        "marked",
        "renewed",
        "started",
        "task",
    )

    def __init__(self, job: alkstore.Job[Any], handler: _handlers.Handler, now: float) -> None:
        self.job = job
        self.key: Key = (job.id, job.lease_token)
        self.handler = handler
        self.renewed = now  # time.monotonic() of the claim or the last renewal
        self.started: float | None = None  # time.monotonic() when its handler started
        self.marked = job.started  # its start is recorded in the database
        self.finished = False  # the handler returned; its ack is batched
        self.abandoned = False  # released, timed out or lease lost: its result is ignored
        self.task: concurrent.futures.Future[Any] | None = None  # async: cancelled on loss


class InFlight:
    """The held jobs under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._items: dict[Key, Running] = {}

    def add(self, items: list[Running]) -> None:
        with self.lock:
            for item in items:
                self._items[item.key] = item

    def get(self, job: alkstore.Job[Any]) -> Running | None:
        return self._items.get(key(job))

    def pop(self, job: alkstore.Job[Any]) -> Running | None:
        with self.lock:
            return self._items.pop(key(job), None)

    def discard(self, items: list[Running]) -> None:
        with self.lock:
            for item in items:
                self._items.pop(item.key, None)

    def snapshot(self) -> list[Running]:
        with self.lock:
            return list(self._items.values())

    def abandon_all(self) -> list[Running]:
        """Mark every held job abandoned (shutdown); returns those not already."""
        with self.lock:
            left = [item for item in self._items.values() if not item.abandoned]
            for item in left:
                item.abandoned = True
            return left

    def clear(self) -> None:
        with self.lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class Counters(Counter[str]):
    """`worker.counters`: read freely; `add` is the only writer, from any thread.

    `by_queue` keeps the same counts per (queue, name) for the metrics exporter, which
    reads them when scraped (relay.metrics); `timings`, once it turns them on, the
    handlers' durations, given a batch at a time (docs/adr/0019)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.by_queue: Counter[tuple[str, str]] = Counter()
        self.timings: Timings | None = None

    def add(self, name: str, n: int = 1, queue: str | None = None) -> None:
        if n:
            with self._lock:
                self[name] += n
                if queue is not None:
                    self.by_queue[queue, name] += n

    def per_queue(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.by_queue)

    def tally(
        self, queues: Iterable[str], since: dict[tuple[str, str], int]
    ) -> dict[str, dict[str, int]]:
        """Per queue, what was done after `since` (a `per_queue()`): acked (`done`), failed
        attempts that run again (`retried`), dead-lettered (`dead`): what a worker writes
        in its row at each refresh (docs/adr/0023, addendum)."""
        now = self.per_queue()

        def n(queue: str, *names: str) -> int:
            return sum(now.get((queue, k), 0) - since.get((queue, k), 0) for k in names)

        return {
            q: {
                "done": n(q, "ack"),
                # a last attempt counts as retry (or timeout) and as dead: it ran no more
                "retried": n(q, "retry", "timeout") - n(q, "dead"),
                "dead": n(q, "dead", "fail", "poison"),
            }
            for q in queues
        }

    def timed(self, queue: str, seconds: Iterable[float]) -> None:
        """Handler durations (seconds) of jobs of `queue`, when metrics are on."""
        timings = self.timings
        if timings is not None:
            timings.observe(queue, seconds)
