"""The relay loop: tail the log, fan events out into subscribed queues, exactly once.

One relay per namespace is active at a time (a lease with a fencing token);
any number of others stand by and take over within about `lease_ttl * 4/3`
seconds of the active one dying. See docs/adr/0007-relay.md.
"""

from __future__ import annotations

import logging
import threading
import time

import alkstore
from relay import _checks
from relay.metrics import _sources
from relay.sinks import SinkLoop

log = logging.getLogger("alkstore.relay")


class Relay:
    """Runs `store.relay_batch` in a loop while holding the namespace's relay lease."""

    def __init__(
        self,
        store: alkstore.Store,
        *,
        batch: int = 5_000,
        lease_ttl: float = 3.0,
        poll: float = 1.0,
        retention: float | None = _checks.DEFAULT_RETENTION.log,
        dead_retention: float | None = _checks.DEFAULT_RETENTION.dead_letters,
        maintenance_every: float = 5.0,
        schedules: bool = True,
        sinks: bool = True,
        sink_batch: int = 1_000,
    ) -> None:
        self.store = store
        self.batch = _checks.count("batch", batch)
        self.lease_ttl = _checks.seconds("lease_ttl", lease_ttl)
        self.lease = store.lease("relay", ttl=lease_ttl)
        self.poll = min(_checks.seconds("poll", poll), lease_ttl / 3)
        # Seconds events are kept after every subscription passed them, and dead letters
        # (unless their queue says otherwise); None or 0: forever (docs/adr/0018).
        self.retention = _checks.retention("retention", retention)
        self.dead_retention = _checks.retention("dead_retention", dead_retention)
        self.maintenance_every = _checks.seconds("maintenance_every", maintenance_every)
        self.relayed_events = 0
        self.created_jobs = 0
        self.reconnects = 0  # database errors retried (for relay.metrics, ADR 0019)
        self.fired = 0  # schedule boundaries its embedded scheduler fired
        self._stop = threading.Event()
        self._next_maintenance = 0.0
        self.schedules = schedules
        # broker sink subscriptions, fed under the same lease (docs/adr/0026)
        self.sinks = SinkLoop(store, self.lease, batch=_checks.count("sink_batch", sink_batch))
        self._feed_sinks = sinks
        _sources.add_relay(self)

    @property
    def is_leader(self) -> bool:
        return self.lease.token is not None

    def stop(self) -> None:
        self._stop.set()
        self.store.engine.wake.fire()  # interrupt an idle wait

    def run(self) -> None:
        """Relay until `stop()` (or a signal handler calling it).

        At startup the database must be reachable and migrated (StorageError,
        NotMigrated); later database errors are logged and retried with backoff, but
        a permanent one (a missing privilege or table: `alkstore.PermanentError`) stops
        the relay: it is raised (docs/adr/0020)."""
        self.store.check()
        listener = self.store.listen()
        try:
            failures = 0
            while not self._stop.is_set():
                try:
                    if not self.is_leader and not self._campaign():
                        self._stop.wait(self.lease_ttl / 3)
                        continue
                    busy = self.step()
                    wait = self._fire_schedules()
                    self._maintain()
                    failures = 0
                except alkstore.StorageError as exc:  # e.g. the database restarted or a
                    # connection was terminated
                    if isinstance(exc, alkstore.PermanentError):
                        log.error("relay stopping: %s", exc)
                        raise
                    failures += 1
                    self.reconnects += 1
                    delay = min(5.0, 0.1 * 2**failures)
                    log.warning("relay: database error (%s); retrying in %.1fs", exc, delay)
                    self._stop.wait(delay)
                    continue
                if not busy:
                    listener.wait(wait)
        finally:
            self.sinks.close()
            if self.is_leader:
                try:
                    self.lease.release()
                    log.info("relay released the lease")
                except alkstore.AlkstoreError as exc:  # it expires on its own
                    log.warning("relay could not release the lease: %s", exc)

    def step(self) -> bool:
        """One batch (taking the lease first if free); True if there may be more to do."""
        if not self.is_leader and not self._campaign():
            return False
        try:
            jobs, covered = self.store.relay_batch(self.lease, self.batch)
        except alkstore.NotLeader:
            log.warning("relay lost the lease to another process; standing by")
            return False
        self.relayed_events += covered
        self.created_jobs += jobs
        sinks_busy = False
        if self._feed_sinks:  # broker sink subscriptions (docs/adr/0026)
            try:
                sinks_busy = self.sinks.step()
            except alkstore.NotLeader:
                log.warning("relay lost the lease to another process; standing by")
                return False
        if covered:
            log.debug(
                "relayed %d events into %d jobs",
                covered,
                jobs,
                extra={"alkstore": {"events": covered, "jobs": jobs}},
            )
        return covered >= self.batch or sinks_busy

    def _fire_schedules(self) -> float:
        """The embedded scheduler, fenced by the relay's lease; returns the wait until the
        next boundary (at most `poll`)."""
        if not self.schedules or not self.is_leader:
            return self.poll
        try:
            self.fired += self.store.fire_schedules(self.lease)
        except alkstore.AlkstoreError as exc:
            if isinstance(exc, alkstore.PermanentError):
                raise
            log.warning("scheduler tick failed: %s", exc)
            return self.poll
        wait = self.store.next_schedule_due()
        return self.poll if wait is None else max(0.0, min(self.poll, wait))

    def _campaign(self) -> bool:
        if self.lease.acquire():
            log.info("relay is active (lease token %d)", self.lease.token)
            return True
        return False

    def _maintain(self) -> None:
        now = time.monotonic()
        if now < self._next_maintenance:
            return
        self._next_maintenance = now + self.maintenance_every
        policy = alkstore.Retention(dead_letters=self.dead_retention, log=self.retention)
        swept = self.store.sweep(policy)
        if self.schedules:
            self.store.prune_schedule_firings()
        if swept.expired or swept.lease_expired or swept.purged:
            log.info(
                "maintenance: %d expired, %d lease-expired to dead letters; %d purged",
                swept.expired,
                swept.lease_expired,
                swept.purged,
            )
        if swept.pruned_events:
            log.info(
                "maintenance: pruned %d events older than %gs", swept.pruned_events, self.retention
            )
