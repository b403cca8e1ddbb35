"""The scheduler runner: fire due schedule boundaries, exactly once across runners.

It runs inside `alkstore relay` (fenced by the relay's lease) and on its own as
`alkstore scheduler` (its own "scheduler" lease). Any number may run: a firing is
a compare-and-set plus a unique (schedule, boundary) row in the appending
transaction (docs/adr/0009-scheduler.md).

Boundaries follow the database's clock (the tick's `now`, and `next_schedule_due()`
against it); this process's own waits use `time.monotonic`, so a jump of the host's
wall clock changes nothing here (tests/faults/test_scheduler_host_clock.py).
"""

from __future__ import annotations

import logging
import threading
import time

import alkstore
from relay import _checks
from relay.metrics import _sources

log = logging.getLogger("alkstore.scheduler")


class Scheduler:
    def __init__(self, store: alkstore.Store, *, lease_ttl: float = 3.0, poll: float = 1.0) -> None:
        self.store = store
        self.lease_ttl = _checks.seconds("lease_ttl", lease_ttl)
        self.lease = store.lease("scheduler", ttl=lease_ttl)
        self.poll = min(_checks.seconds("poll", poll), lease_ttl / 3)
        self.fired = 0
        self.reconnects = 0  # failed ticks retried (for relay.metrics, ADR 0019)
        self._stop = threading.Event()
        self._next_prune = 0.0
        _sources.add_scheduler(self)

    def stop(self) -> None:
        self._stop.set()

    def tick(self, lease: alkstore.Lease | None = None) -> float:
        """Fire what is due; return how long to sleep before the next boundary (<= poll)."""
        fired = self.store.fire_schedules(lease)
        if fired:
            self.fired += fired
            log.debug("fired %d schedule boundaries", fired)
        wait = self.store.next_schedule_due()
        return self.poll if wait is None else max(0.0, min(self.poll, wait))

    def _prune(self) -> None:
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + 3600
            self.store.prune_schedule_firings()

    def run(self) -> None:
        """Run until `stop()`, holding the scheduler lease (standbys wait).

        At startup the database must be reachable and migrated (StorageError,
        NotMigrated); later failures are logged and retried with backoff, but a
        permanent one (`alkstore.PermanentError`) stops the scheduler: it is raised."""
        self.store.check()
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    if self.lease.token is None:
                        if not self.lease.acquire():
                            self._stop.wait(self.lease_ttl / 3)
                            continue
                        log.info("scheduler is active (lease token %d)", self.lease.token)
                    elif not self.lease.renew():  # idle ticks keep the lease too
                        log.warning("scheduler lost its lease; standing by")
                        continue
                    wait = self.tick(self.lease)
                    self._prune()
                    failures = 0
                except alkstore.AlkstoreError as exc:  # e.g. the database restarted
                    if isinstance(exc, alkstore.PermanentError):
                        log.error("scheduler stopping: %s", exc)
                        raise
                    failures += 1
                    self.reconnects += 1
                    wait = min(5.0, 0.1 * 2**failures)
                    log.warning("scheduler tick failed (%s); retrying in %.1fs", exc, wait)
                self._stop.wait(wait)
        finally:
            if self.lease.token is not None:
                try:
                    self.lease.release()
                except alkstore.AlkstoreError as exc:  # it expires on its own
                    log.warning("scheduler could not release the lease: %s", exc)
