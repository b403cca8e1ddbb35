"""Lease renewal that the handlers cannot starve (docs/adr/0012).

One thread renews every lease the worker holds (prefetched, running, or done and
waiting for its ack) in one statement, on the store's reserved connection, as
soon as the oldest renewal is a third of its lease old. A lease found lost is
handed to `on_lost` (the job is abandoned: its handler is told through
`job.lease_lost`, an async one is cancelled). It also sees sync handlers that ran
past their timeout, and records the starts of prefetched jobs that have run for
START_AFTER seconds (their attempts count from then in the database; a job done
sooner needs no mark at all, so short jobs cost no statement for it). Every
`presence.every` seconds it refreshes the worker's row in the workers table on the same
connection, after any renewal due in that tick (docs/adr/0018): one short statement
every 10 s, never on the claim loop's path, and a worker whose handlers hold every
pooled connection is still seen alive. The refresh also writes what the worker has done
per queue since it started (docs/adr/0023, addendum: the dashboard's throughput).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

import alkstore
from relay.worker import _inflight

log = logging.getLogger("alkstore.worker")
TICK = 0.05  # seconds between looks at the held jobs
RETRY_AFTER = 0.25  # seconds between renewals while the database does not answer
START_AFTER = 0.05  # seconds a prefetched job runs before its start is recorded


class LeaseKeeper:
    def __init__(
        self,
        store: alkstore.Store,
        inflight: _inflight.InFlight,
        counters: _inflight.Counters,
        *,
        renew: bool,
        on_lost: Callable[[_inflight.Running], None],
        on_timeout: Callable[[_inflight.Running, float], None],
        presence: alkstore.Presence | None = None,
    ) -> None:
        self._store = store
        self._presence = presence
        self._inflight = inflight
        self._counters = counters
        self._renew = renew
        self._on_lost = on_lost
        self._on_timeout = on_timeout

    def run(self, done: threading.Event) -> None:
        """The renewal thread: until `done` (renewal goes on through the grace period)."""
        renewal = self._store.renewal()
        retry_at = 0.0
        presence = self._presence
        beat_at = math.inf if presence is None else time.monotonic() + presence.every
        try:
            while not done.wait(TICK):
                now = time.monotonic()
                items, due, late, renew_at = self._look(now)
                if due:
                    self._mark_starts(renewal, due)
                for item in late:
                    assert item.started is not None
                    self._on_timeout(item, now - item.started)
                if self._renew and items and now >= retry_at and now >= renew_at:
                    retry_at = self._renew_all(renewal, items, now)
                if presence is not None and now >= beat_at:  # after the renewal it waits for
                    beat_at = now + self._beat(renewal, presence)
        finally:
            renewal.close()

    def _renew_all(
        self, renewal: alkstore.Renewal, items: list[_inflight.Running], now: float
    ) -> float:
        """Renew every held lease in one statement; hand the lost ones to on_lost. Returns
        when to try again at the soonest (later than now after a failure)."""
        try:
            lost = renewal.renew([item.job for item in items])
        except alkstore.StorageError as exc:
            if isinstance(exc, alkstore.PermanentError):
                raise  # the worker stops
            log.warning("lease renewal of %d jobs failed: %s", len(items), exc)
            self._counters.add("reconnect")
            return now + RETRY_AFTER
        gone = {_inflight.key(job) for job in lost}
        renewed: Counter[str] = Counter()
        for item in items:
            item.renewed = now
            if item.key not in gone:
                renewed[item.job.queue] += 1
        for queue, n in renewed.items():
            self._counters.add("renewed", n, queue)
        for item in items:
            if item.key in gone and not item.abandoned:
                self._on_lost(item)
        return 0.0

    @staticmethod
    def _beat(renewal: alkstore.Renewal, presence: alkstore.Presence) -> float:
        """Refresh the worker's row; the seconds until the next refresh."""
        try:
            renewal.beat(presence)
        except alkstore.StorageError as exc:  # the row ages; tried again soon
            log.warning("could not refresh the worker's row (%s)", exc)
            return min(presence.every, 1.0)
        return presence.every

    def _look(
        self, now: float
    ) -> tuple[list[_inflight.Running], list[_inflight.Running], list[_inflight.Running], float]:
        """One pass over the held jobs (every TICK, so a plain loop): those held, the
        prefetched ones running for START_AFTER whose start is not recorded, sync handlers
        past their timeout, and when the oldest renewal is a third of its lease old."""
        since = now - START_AFTER
        items: list[_inflight.Running] = []
        due: list[_inflight.Running] = []
        late: list[_inflight.Running] = []
        renew_at = float("inf")
        for item in self._inflight.snapshot():
            if item.abandoned or item.job.acked:  # acked by job.transaction(): gone
                continue
            items.append(item)
            at = item.renewed + item.job.lease_ms / 3000
            if at < renew_at:
                renew_at = at
            started = item.started
            if started is None:
                continue
            if started <= since and not item.marked and not item.finished:
                due.append(item)
            timeout = item.handler.timeout
            if timeout is not None and now - started > timeout and not item.handler.is_async:
                late.append(item)  # asyncio cancels async handlers itself
        return items, due, late, renew_at

    def _mark_starts(self, renewal: alkstore.Renewal, due: list[_inflight.Running]) -> None:
        """Record the starts of prefetched jobs that have run for START_AFTER (on the
        renewal's connection: never behind the handlers)."""
        try:
            renewal.mark_started([item.job for item in due])
        except alkstore.StorageError as exc:  # tried again next tick
            if isinstance(exc, alkstore.PermanentError):
                raise  # the worker stops
            log.warning("could not record %d job starts (%s)", len(due), exc)
            return
        for item in due:
            item.marked = True
