"""Batched acks.

A finished job stays held (its lease renewed) until its ack is stored: an ack
that waits for a connection, or fails while the database is away, is tried again
and never lets the lease run out under a job that succeeded (ADR 0012).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import alkstore
from relay.worker import _inflight
from relay.worker._fields import fields

log = logging.getLogger("alkstore.worker")
RETRY_AFTER = 0.5  # seconds between tries of a failed flush

Report = Callable[[alkstore.Job[Any], str, float], None]
Entry = tuple[_inflight.Running, float]  # a finished job and its handler's seconds


class Acks:
    def __init__(
        self,
        store: alkstore.Store,
        inflight: _inflight.InFlight,
        counters: _inflight.Counters,
        report: Report,
        reporting: Callable[[], bool],
        *,
        batch: int,
        flush: float,
    ) -> None:
        self._store = store
        self._queues: dict[str, alkstore.Queue] = {}  # one per name: its config is cached
        self._inflight = inflight
        self._counters = counters
        self._report = report
        self._reporting = reporting  # an on_outcome hook is set: report each ack
        self._batch = batch
        self._flush_every = flush
        self._lock = threading.RLock()  # `with self._lock`: a C call per finished job
        self._cond = threading.Condition(self._lock)
        self._acks: list[Entry] = []

    def ack(self, item: _inflight.Running, seconds: float) -> None:
        with self._lock:
            self._acks.append((item, seconds))
            if len(self._acks) >= self._batch:
                self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def run(self, done: threading.Event) -> None:
        """The ack thread: flush until `done` and nothing is left (or the database stays
        away past `done`: those jobs come back when their leases run out)."""
        while True:
            with self._cond:
                if not self._acks:
                    self._cond.wait(self._flush_every)
                if len(self._acks) < self._batch:
                    self._cond.wait(self._flush_every)  # let a batch gather, briefly
                acks, self._acks = self._acks, []
            if acks:
                failed = self._flush(acks)
                if failed and not done.is_set():
                    with self._cond:  # try these again, before the ones that came meanwhile
                        self._acks[:0] = failed
                    done.wait(RETRY_AFTER)
            elif done.is_set():
                return

    def _flush(self, acks: list[Entry]) -> list[Entry]:
        """Store the batch; returns the acks that could not be stored (to try again)."""
        failed: list[Entry] = []
        grouped: dict[str, list[Entry]] = {}
        for entry in acks:
            grouped.setdefault(entry[0].job.queue, []).append(entry)
        debug = log.isEnabledFor(logging.DEBUG)
        for name, entries in grouped.items():
            jobs = [item.job for item, _ in entries]
            try:
                queue = self._queues.get(name) or self._queues.setdefault(
                    name, self._store.queue(name)
                )
                lost = set(queue.ack_many(jobs))
            except alkstore.StorageError as exc:
                if isinstance(exc, alkstore.PermanentError):
                    raise  # the worker stops (its jobs come back when their leases end)
                log.warning("ack of %d jobs failed (%s); trying again", len(jobs), exc)
                self._counters.add("reconnect", 1, name)
                failed.extend(entries)
                continue
            self._inflight.discard([item for item, _ in entries])
            self._counters.add("ack", len(jobs) - len(lost), name)
            self._counters.add("lease_lost", len(lost), name)
            if self._counters.timings is not None:  # metrics on (ADR 0019)
                self._counters.timed(name, [seconds for _, seconds in entries])
            if not (debug or self._reporting()):
                continue
            for item, seconds in entries:
                job = item.job
                kind = "lease_lost" if job.id in lost else "ack"
                if debug:
                    log.debug("job %s#%d: %s", job.queue, job.id, kind, extra=fields(job, kind))
                self._report(job, kind, seconds)
        return failed
