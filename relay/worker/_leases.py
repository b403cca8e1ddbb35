"""Lease renewal that the handlers cannot starve (docs/adr/0012).

One thread renews every lease the worker holds (prefetched, running, or done and
waiting for its ack) in one statement, on the store's reserved connection, as
soon as the oldest renewal is a third of its lease old. A lease found lost is
handed to `on_lost` (the job is abandoned: its handler is told through
`job.lease_lost`, an async one is cancelled). It also sees sync handlers that ran
past their timeout, and records the starts of prefetched jobs that have run for
START_AFTER seconds (their attempts count from then in the database; a job done
sooner needs no mark at all, so short jobs cost no statement for it).
"""

from __future__ import annotations

import logging
import threading
import time
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
        *,
        renew: bool,
        on_lost: Callable[[_inflight.Running], None],
        on_timeout: Callable[[_inflight.Running, float], None],
    ) -> None:
        self._store = store
        self._inflight = inflight
        self._renew = renew
        self._on_lost = on_lost
        self._on_timeout = on_timeout

    def run(self, done: threading.Event) -> None:
        """The renewal thread: until `done` (renewal goes on through the grace period)."""
        renewal = self._store.renewal()
        retry_at = 0.0
        try:
            while not done.wait(TICK):
                now = time.monotonic()
                items = [item for item in self._inflight.snapshot() if not item.abandoned]
                self._mark_starts(renewal, items, now - START_AFTER)
                for item in items:
                    timeout = item.handler.timeout
                    if (
                        timeout is not None
                        and not item.handler.is_async  # asyncio cancels those itself
                        and item.started is not None
                        and now - item.started > timeout
                    ):
                        self._on_timeout(item, now - item.started)
                if not self._renew or not items or now < retry_at:
                    continue
                if now < min(item.renewed + item.job.lease_ms / 3000 for item in items):
                    continue
                try:
                    lost = renewal.renew([item.job for item in items])
                except alkstore.StorageError as exc:
                    if isinstance(exc, alkstore.PermanentError):
                        raise  # the worker stops
                    log.warning("lease renewal of %d jobs failed: %s", len(items), exc)
                    retry_at = now + RETRY_AFTER
                    continue
                for item in items:
                    item.renewed = now
                gone = {_inflight.key(job) for job in lost}
                for item in items:
                    if item.key in gone and not item.abandoned:
                        self._on_lost(item)
        finally:
            renewal.close()

    def _mark_starts(
        self, renewal: alkstore.Renewal, items: list[_inflight.Running], since: float
    ) -> None:
        """Record the starts of prefetched jobs running since before `since` (on the
        renewal's connection: never behind the handlers)."""
        due = [
            item
            for item in items
            if not item.marked
            and not item.finished
            and item.started is not None
            and item.started <= since
        ]
        if not due:
            return
        try:
            renewal.mark_started([item.job for item in due])
        except alkstore.StorageError as exc:  # tried again next tick
            if isinstance(exc, alkstore.PermanentError):
                raise  # the worker stops
            log.warning("could not record %d job starts (%s)", len(due), exc)
            return
        for item in due:
            item.marked = True
