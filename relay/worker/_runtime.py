"""The Worker: typed handlers, concurrency limits, batched claims and acks, lease
renewal that the handlers cannot starve, retries, graceful shutdown.
See docs/adr/0008-worker.md and 0012."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import alkstore
from relay import _checks, _handlers
from relay.metrics import _sources
from relay.worker import _acks, _dispatch, _fields, _inflight, _leases, _outcomes, _slots

log = logging.getLogger("alkstore.worker")
F = TypeVar("F", bound=Callable[..., object])


class WorkerCrashed(alkstore.AlkstoreError):
    """A worker's internal thread failed; the worker stopped (the log has the cause)."""


class Worker:
    """Consumes named queues with registered handlers. `run()` blocks until `stop()`."""

    def __init__(
        self,
        store: alkstore.Store,
        *,
        concurrency: int = 32,
        batch: int = 100,
        visibility: float | None = None,
        poll: float = 1.0,
        grace: float = 30.0,
        ack_flush: float = 0.005,
        renew: bool = True,
        maintenance_every: float = 5.0,
        retention: float | None = _checks.DEFAULT_RETENTION.log,
        dead_retention: float | None = _checks.DEFAULT_RETENTION.dead_letters,
        unknown_type_grace: float = 300.0,
        on_outcome: Callable[[alkstore.Job[Any], str, float], None] | None = None,
    ) -> None:
        self.store = store
        self.concurrency = concurrency
        self.batch = _checks.count("batch", batch)
        self.visibility = _checks.optional_seconds("visibility", visibility)
        self.poll = _checks.seconds("poll", poll)
        self.grace = _checks.seconds("grace", grace, zero=True)
        self.ack_flush = _checks.seconds("ack_flush", ack_flush, zero=True)
        self.renew = renew
        self.maintenance_every = _checks.seconds("maintenance_every", maintenance_every)
        self.retention = retention
        self.dead_retention = dead_retention
        self.unknown_type_grace = _checks.seconds(
            "unknown_type_grace", unknown_type_grace, zero=True
        )
        self.on_outcome = on_outcome
        self.handlers: dict[str, _handlers.Handler] = {}
        self.counters = _inflight.Counters()
        self._stop = threading.Event()  # stop claiming
        self._done = threading.Event()  # the helpers (acks, renewal, sweep) may end
        self._wakers: list[Callable[[], None]] = []
        self._crash: BaseException | None = None
        self._inflight = _inflight.InFlight()
        self._running = threading.Lock()  # held by run()
        _sources.add_worker(self)  # what relay.metrics reads when scraped (ADR 0019)

    @property
    def retention(self) -> float | None:
        """Seconds the log's events are kept after every subscription passed them, by the
        sweeps this worker runs (None or 0: forever; docs/adr/0018)."""
        return self._retention

    @retention.setter
    def retention(self, value: float | None) -> None:
        self._retention = _checks.retention("retention", value)

    @property
    def dead_retention(self) -> float | None:
        """Seconds dead letters are kept, unless their queue has its own `dead_retention`
        (None or 0: forever; docs/adr/0018)."""
        return self._dead_retention

    @dead_retention.setter
    def dead_retention(self, value: float | None) -> None:
        self._dead_retention = _checks.retention("dead_retention", value)

    @property
    def concurrency(self) -> int:
        """How many handlers run at once in total (>= 1)."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self._concurrency = _checks.count("concurrency", value)

    def handler(
        self, queue: str, *, concurrency: int = 8, timeout: float | None = None
    ) -> Callable[[F], F]:
        """Register `fn(job)` (sync or async) for `queue`; the `Job[X]` annotation decides
        how the payload is decoded."""
        self.store.queue(queue)  # validates the name
        _checks.count("concurrency", concurrency)
        _checks.optional_seconds("timeout", timeout)

        def register(fn: F) -> F:
            self.handlers[queue] = _handlers.make_handler(queue, fn, concurrency, timeout)
            return fn

        return register

    def stop(self) -> None:
        """Stop claiming; in-flight jobs get `grace` seconds, then their leases are released.

        It ends the run in progress, also one that is still starting (before its row or
        its threads exist); a stop() while no run() runs does nothing."""
        self._stop.set()
        self.store.engine.wake.fire()  # wake idle dispatchers (a spurious wake for others)
        for wake in self._wakers:
            wake()

    # -- running ---------------------------------------------------------------------

    def run(self, *, queues: Iterable[str] | None = None, once: bool = False) -> None:
        """Process jobs until `stop()`; with once=True, until the queues have no ready job.

        One run() at a time (another raises at once); it may run again once it returned.
        At startup the database must be reachable and migrated (StorageError,
        NotMigrated). Later claim failures are logged and retried with backoff; with
        once=True, ONCE_ATTEMPTS failures in a row end the drain with the last error.
        A permanent error (`alkstore.PermanentError`: a missing privilege or table) of
        any part of the worker stops it at once and is raised (docs/adr/0020).
        Raises WorkerCrashed if one of the worker's own threads failed (never for what a
        handler does): a supervisor should restart the process."""
        names = list(self.handlers) if queues is None else list(queues)
        missing = [q for q in names if q not in self.handlers]
        if missing or not names:
            raise alkstore.InvalidArgument(f"no handler registered for queues {missing or names}")
        if not self._running.acquire(blocking=False):  # they would share every part
            raise alkstore.AlkstoreError(
                "this worker is already running: one run() at a time (make another Worker)"
            )
        self._stop.clear()  # before anything of the run shows: a stop from now on ends it
        try:
            self._run(names, once)
        finally:
            self._running.release()

    def _run(self, names: list[str], once: bool) -> None:
        self.store.check()
        since = self.counters.per_queue()  # the row counts this run's jobs only
        presence = self.store.worker_presence(
            names, self.concurrency, lambda: self.counters.tally(names, since)
        )
        try:
            self._serve(names, once, presence)
        finally:
            try:  # a clean stop: the row goes (a killed worker's ages out)
                presence.leave()
            except alkstore.AlkstoreError as exc:
                log.warning("could not remove the worker's row (%s); it ages out", exc)

    def _serve(self, names: list[str], once: bool, presence: alkstore.Presence) -> None:
        self._done.clear()
        self._crash = None
        inflight = self._inflight = _inflight.InFlight()
        slots = _slots.Slots(self.concurrency, {q: self.handlers[q].concurrency for q in names})
        sync_threads = sum(h.concurrency for q, h in self.handlers.items() if q in names)
        pool = _slots.DaemonPool(max(1, sync_threads))
        loop, loop_thread = None, None
        if any(self.handlers[q].is_async for q in names):
            loop = asyncio.new_event_loop()
            loop_thread = threading.Thread(
                target=loop.run_forever, name="worker-async", daemon=True
            )
            loop_thread.start()
        acks = _acks.Acks(
            self.store, inflight, self.counters, self._report,
            lambda: self.on_outcome is not None, batch=self.batch, flush=self.ack_flush,
        )  # fmt: skip
        outcomes = _outcomes.Outcomes(
            self.store, inflight, self.counters, acks, slots, self._report,
            self.unknown_type_grace,
        )  # fmt: skip
        keeper = _leases.LeaseKeeper(
            self.store,
            inflight,
            self.counters,
            renew=self.renew,
            on_lost=self._lost,
            on_timeout=lambda item, ran: self._timed_out(outcomes, item, ran),
            presence=presence,
        )
        self._wakers = [slots.wake, acks.wake]
        ctx = _dispatch.Context(
            self.store, inflight, self.counters, acks, outcomes, slots, pool, loop,
            self._stop, self.batch, self.visibility, self.poll,
        )  # fmt: skip
        helpers = [
            self._thread("worker-acks", acks.run, self._done),
            self._thread("worker-leases", keeper.run, self._done),
            self._thread("worker-sweep", self._maintain),
        ]
        claimers = [_dispatch.Dispatcher(ctx, self.handlers[q], once) for q in names]
        dispatchers = [self._thread(f"claim-{c.queue}", c.run) for c in claimers]
        log.info("worker started: queues %s, concurrency %d", ", ".join(names), self.concurrency)
        for thread in helpers + dispatchers:
            thread.start()
        try:
            for thread in dispatchers:
                while thread.is_alive():
                    thread.join(0.2)
        finally:
            self._stop.set()
            self._shutdown(acks, pool, loop, loop_thread, helpers)
        if isinstance(self._crash, alkstore.PermanentError):
            raise self._crash
        if self._crash is not None:
            raise WorkerCrashed(
                f"the worker stopped: {type(self._crash).__name__}: {self._crash}"
            ) from self._crash
        for claimer in claimers:
            if claimer.gave_up is not None:
                raise claimer.gave_up

    def _thread(self, name: str, target: Callable[..., None], *args: Any) -> threading.Thread:
        """A worker thread whose unexpected exception stops the whole worker (logged)."""

        def guarded() -> None:
            try:
                target(*args)
            except alkstore.PermanentError as exc:  # one line: the fix is the database's
                log.error("worker thread %s: %s; stopping the worker", name, exc)
                if self._crash is None:
                    self._crash = exc
                self.stop()
            except BaseException as exc:
                log.critical("worker thread %s failed; stopping the worker", name, exc_info=True)
                if self._crash is None:
                    self._crash = exc
                self.stop()

        return threading.Thread(target=guarded, name=name, daemon=True)

    def _permanent(self) -> bool:
        return isinstance(self._crash, alkstore.PermanentError)

    def _report(self, job: alkstore.Job[Any], kind: str, seconds: float) -> None:
        if self.on_outcome is None:
            return
        try:
            self.on_outcome(job, kind, seconds)
        except Exception:
            log.exception("the on_outcome hook raised; carrying on")

    def _lost(self, item: _inflight.Running) -> None:
        """The renewal found this lease taken: the job is someone else's now."""
        with self._inflight.lock:
            if item.finished or item.abandoned:
                return  # its ack is on the way and will tell
            item.abandoned = True
            item.job.lease_lost = True
            prefetched = item.started is None
        if prefetched:
            self._inflight.pop(item.job)
        if item.task is not None:
            item.task.cancel()  # an async handler: its result would be ignored anyway
        self.counters.add("lease_lost", 1, item.job.queue)
        log.warning(
            "job %s#%d: lease lost",
            item.job.queue,
            item.job.id,
            extra=_fields.fields(item.job, "lease_lost"),
        )

    def _timed_out(self, outcomes: _outcomes.Outcomes, item: _inflight.Running, ran: float) -> None:
        """A sync handler past its timeout: its thread runs on, its result is ignored."""
        with self._inflight.lock:
            if item.abandoned or item.finished:
                return
            item.abandoned = True
        self._inflight.pop(item.job)
        job = item.job
        kind = outcomes.record(job, "timeout", None, f"timed out after {item.handler.timeout}s")
        self.counters.add(kind, 1, job.queue)
        self.counters.timed(job.queue, (ran,))
        self._report(job, kind, ran)

    def _maintain(self) -> None:
        """Maintenance (store.sweep) every `maintenance_every` seconds, one process at a time."""
        policy = alkstore.Retention(dead_letters=self.dead_retention, log=self.retention)
        while True:
            try:
                self.store.sweep(policy)
            except alkstore.StorageError as exc:
                if isinstance(exc, alkstore.PermanentError):
                    raise  # the worker stops
                log.warning("maintenance failed: %s", exc)
            if self._done.wait(self.maintenance_every):
                return

    def _shutdown(
        self,
        acks: _acks.Acks,
        pool: _slots.DaemonPool,
        loop: asyncio.AbstractEventLoop | None,
        loop_thread: threading.Thread | None,
        helpers: list[threading.Thread],
    ) -> None:
        # A permanent error (a missing privilege) fails the acks too: no grace to wait out
        deadline = time.monotonic() + (0 if self._permanent() else self.grace)
        while len(self._inflight) and time.monotonic() < deadline:
            time.sleep(0.01)
        for item in self._inflight.abandon_all():
            if item.finished:
                continue  # its ack is being flushed
            try:
                item.job.release()  # an attempt that started does not count
                self.counters.add("released", 1, item.job.queue)
            except alkstore.AlkstoreError:
                pass
        self._done.set()
        acks.wake()
        for thread in helpers:
            thread.join()
        self._inflight.clear()
        pool.shutdown()
        if loop_thread is not None and loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            loop_thread.join()
            loop.close()
        log.info("worker stopped: %s", dict(self.counters))
