"""What a worker holds, keyed by (job id, lease token), and its counters.

A job whose lease lapsed can be claimed again by the same worker: the two claims
are two entries with two tokens, so renewing, acking or dropping one never
touches the other (issue 12, item 2).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import alkstore
from relay import _handlers

Key = tuple[int, int]


def key(job: alkstore.Job[Any]) -> Key:
    return (job.id, job.lease_token)


@dataclass(eq=False)
class Running:
    """A held job: prefetched (started is None), in its handler, or done and waiting
    for its ack. The leases of all three are renewed."""

    job: alkstore.Job[Any]
    handler: _handlers.Handler
    renewed: float  # time.monotonic() of the claim or the last renewal
    started: float | None = None
    finished: bool = False  # the handler returned; its ack is batched
    abandoned: bool = False  # released, timed out or lease lost: its result is ignored
    task: concurrent.futures.Future[Any] | None = None  # an async handler's: cancelled on loss


class InFlight:
    """The held jobs under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._items: dict[Key, Running] = {}

    def add(self, items: list[Running]) -> None:
        with self.lock:
            for item in items:
                self._items[key(item.job)] = item

    def get(self, job: alkstore.Job[Any]) -> Running | None:
        return self._items.get(key(job))

    def pop(self, job: alkstore.Job[Any]) -> Running | None:
        with self.lock:
            return self._items.pop(key(job), None)

    def discard(self, jobs: list[alkstore.Job[Any]]) -> None:
        with self.lock:
            for job in jobs:
                self._items.pop(key(job), None)

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
    """`worker.counters`: read freely; `add` is the only writer, from any thread."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self[name] += n
