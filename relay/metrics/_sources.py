"""The processes of this Python process that an exporter reads when it is scraped.

Every Worker, Relay and Scheduler registers itself when it is made (a weak reference:
registering keeps nothing alive). Nothing is counted for the exporter that they do not
count anyway, except the handlers' durations, which workers keep only once an exporter
turned them on (docs/adr/0019). No prometheus_client import here.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from relay.metrics._timings import Timings

if TYPE_CHECKING:
    from relay._relay import Relay
    from relay._scheduler import Scheduler
    from relay.worker import Worker

_lock = threading.Lock()
_workers: weakref.WeakSet[Worker] = weakref.WeakSet()
_relays: weakref.WeakSet[Relay] = weakref.WeakSet()
_schedulers: weakref.WeakSet[Scheduler] = weakref.WeakSet()
_timing = False


def add_worker(worker: Worker) -> None:
    with _lock:
        _workers.add(worker)
        if _timing:
            worker.counters.timings = Timings()


def add_relay(relay: Relay) -> None:
    with _lock:
        _relays.add(relay)


def add_scheduler(scheduler: Scheduler) -> None:
    with _lock:
        _schedulers.add(scheduler)


def start_timing() -> None:
    """From now on every worker keeps its handlers' durations (for the histogram)."""
    global _timing
    with _lock:
        _timing = True
        for worker in _workers:
            if worker.counters.timings is None:
                worker.counters.timings = Timings()


def workers() -> list[Worker]:
    with _lock:
        return list(_workers)


def relays() -> list[Relay]:
    with _lock:
        return list(_relays)


def schedulers() -> list[Scheduler]:
    with _lock:
        return list(_schedulers)
