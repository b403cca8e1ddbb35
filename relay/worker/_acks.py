"""Batched acks, and the start marks of prefetched jobs riding with them.

A finished job stays held (its lease renewed) until its ack is stored: an ack
that waits for a connection, or fails while the database is away, is tried again
and never lets the lease run out under a job that succeeded. A prefetched job's
start is recorded with the next flush (within `flush` seconds); a job acked in
that same flush needs no start mark at all, so fast jobs cost no extra statement
(ADR 0012).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import alkstore
from relay.worker import _inflight

log = logging.getLogger("alkstore.worker")
RETRY_AFTER = 0.5  # seconds between tries of a failed flush

Report = Callable[[alkstore.Job[Any], str, float], None]


class Acks:
    def __init__(
        self,
        store: alkstore.Store,
        inflight: _inflight.InFlight,
        counters: _inflight.Counters,
        report: Report,
        *,
        batch: int,
        flush: float,
    ) -> None:
        self._store = store
        self._inflight = inflight
        self._counters = counters
        self._report = report
        self._batch = batch
        self._flush_every = flush
        self._cond = threading.Condition()
        self._acks: list[tuple[_inflight.Running, float]] = []
        self._starts: list[alkstore.Job[Any]] = []

    def ack(self, item: _inflight.Running, seconds: float) -> None:
        with self._cond:
            self._acks.append((item, seconds))
            if len(self._acks) >= self._batch:
                self._cond.notify()

    def started(self, jobs: list[alkstore.Job[Any]]) -> None:
        with self._cond:
            self._starts.extend(jobs)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def run(self, done: threading.Event) -> None:
        """The ack thread: flush until `done` and nothing is left (or the database stays
        away past `done`: those jobs come back when their leases run out)."""
        while True:
            with self._cond:
                if not self._acks and not self._starts:
                    self._cond.wait(self._flush_every)
                if len(self._acks) < self._batch:
                    self._cond.wait(self._flush_every)  # let a batch gather, briefly
                acks, self._acks = self._acks, []
                starts, self._starts = self._starts, []
            if acks or starts:
                failed = self._flush(acks, starts)
                if failed and not done.is_set():
                    with self._cond:  # try these again, before the ones that came meanwhile
                        self._acks[:0] = failed
                    done.wait(RETRY_AFTER)
            elif done.is_set():
                return

    def _flush(
        self, acks: list[tuple[_inflight.Running, float]], starts: list[alkstore.Job[Any]]
    ) -> list[tuple[_inflight.Running, float]]:
        """Store the batch; returns the acks that could not be stored (to try again)."""
        acked = {_inflight.key(item.job) for item, _ in acks}
        by_queue: dict[str, list[alkstore.Job[Any]]] = {}
        for job in starts:  # settled meanwhile (retry, fail, release): nothing to mark
            if _inflight.key(job) not in acked and self._inflight.get(job) is not None:
                by_queue.setdefault(job.queue, []).append(job)
        for name, jobs in by_queue.items():
            try:
                self._store.queue(name).start_many(jobs)
            except alkstore.StorageError as exc:  # an attempt not counted, at worst
                log.warning("could not record %d job starts (%s)", len(jobs), exc)
        failed: list[tuple[_inflight.Running, float]] = []
        seconds = {_inflight.key(item.job): took for item, took in acks}
        grouped: dict[str, list[tuple[_inflight.Running, float]]] = {}
        for item, took in acks:
            grouped.setdefault(item.job.queue, []).append((item, took))
        for name, entries in grouped.items():
            jobs = [item.job for item, _ in entries]
            try:
                lost = set(self._store.queue(name).ack_many(jobs))
            except alkstore.StorageError as exc:
                log.warning("ack of %d jobs failed (%s); trying again", len(jobs), exc)
                failed.extend(entries)
                continue
            self._inflight.discard(jobs)
            self._counters.add("ack", len(jobs) - len(lost))
            self._counters.add("lease_lost", len(lost))
            debug = log.isEnabledFor(logging.DEBUG)
            for job in jobs:
                kind = "lease_lost" if job.id in lost else "ack"
                if debug:
                    log.debug("job %s#%d: %s", job.queue, job.id, kind)
                self._report(job, kind, seconds[_inflight.key(job)])
        return failed
