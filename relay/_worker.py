"""The worker runtime: typed handlers, concurrency limits, batched claims and acks,
automatic lease renewal, retries, graceful shutdown. See docs/adr/0008-worker.md."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tenacity

import alkstore
from relay import _handlers

log = logging.getLogger("alkstore.worker")
F = TypeVar("F", bound=Callable[..., object])
Outcome = tuple[str, float | None, str]  # (ack | retry | fail | poison, delay, reason)


@dataclass
class Running:
    """A claimed job: prefetched (started is None) or in its handler. Leases of both
    are renewed."""

    job: alkstore.Job[Any]
    handler: _handlers.Handler
    started: float | None
    renewed: float
    abandoned: bool = False  # released, timed out or lease lost: its result is ignored


class _DaemonPool:
    """Handler threads that never hold up interpreter exit (unlike ThreadPoolExecutor's):
    a handler abandoned after the grace period must not keep a stopping process alive."""

    def __init__(self, size: int) -> None:
        self._tasks: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"handler-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._tasks.put((fn, args))

    def shutdown(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            fn, args = task
            fn(*args)


@dataclass
class _Slots:
    """In-flight counts per queue and in total, under one condition."""

    total: int
    per_queue: dict[str, int]
    busy: Counter[str] = field(default_factory=Counter)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def take(self, queue: str, want: int) -> int:
        with self.cond:
            free = min(
                self.per_queue[queue] - self.busy[queue], self.total - sum(self.busy.values())
            )
            n = max(0, min(want, free))
            self.busy[queue] += n
            return n

    def give(self, queue: str, n: int = 1) -> None:
        with self.cond:
            self.busy[queue] -= n
            self.cond.notify_all()

    def wait_free(self, queue: str, timeout: float) -> None:
        with self.cond:
            self.cond.wait_for(
                lambda: (
                    self.busy[queue] < self.per_queue[queue]
                    and sum(self.busy.values()) < self.total
                ),
                timeout,
            )


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
        on_outcome: Callable[[alkstore.Job[Any], str, float], None] | None = None,
    ) -> None:
        self.store = store
        self.concurrency = concurrency
        self.batch = batch
        self.visibility = visibility
        self.poll = poll
        self.grace = grace
        self.ack_flush = ack_flush
        self.renew = renew
        self.maintenance_every = maintenance_every
        self.on_outcome = on_outcome
        self.handlers: dict[str, _handlers.Handler] = {}
        self.counters: Counter[str] = Counter()
        self._running: dict[int, Running] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()  # stop claiming
        self._done = threading.Event()  # the helpers (acks, renewal) may end
        self._slots: _Slots | None = None
        self._acks: list[tuple[alkstore.Job[Any], float]] = []
        self._acks_ready = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None

    def handler(
        self, queue: str, *, concurrency: int = 8, timeout: float | None = None
    ) -> Callable[[F], F]:
        """Register `fn(job)` (sync or async) for `queue`; the `Job[X]` annotation decides
        how the payload is decoded."""
        self.store.queue(queue)  # validates the name

        def register(fn: F) -> F:
            self.handlers[queue] = _handlers.make_handler(queue, fn, concurrency, timeout)
            return fn

        return register

    def stop(self) -> None:
        """Stop claiming; in-flight jobs get `grace` seconds, then their leases are released."""
        self._stop.set()
        self.store.engine.wake.fire()  # wake idle dispatchers (a spurious wake for others)
        if self._slots is not None:
            with self._slots.cond:
                self._slots.cond.notify_all()

    # -- running ---------------------------------------------------------------------

    def run(self, *, queues: Iterable[str] | None = None, once: bool = False) -> None:
        """Process jobs until `stop()`; with once=True, until the queues have no ready job."""
        names = list(self.handlers) if queues is None else list(queues)
        missing = [q for q in names if q not in self.handlers]
        if missing or not names:
            raise alkstore.InvalidArgument(f"no handler registered for queues {missing or names}")
        self._stop.clear()
        self._done.clear()
        slots = self._slots = _Slots(
            self.concurrency, {q: self.handlers[q].concurrency for q in names}
        )
        sync_threads = sum(h.concurrency for q, h in self.handlers.items() if q in names)
        pool = _DaemonPool(max(1, sync_threads))
        loop_thread = self._start_loop() if any(self.handlers[q].is_async for q in names) else None
        helpers = [
            threading.Thread(target=self._ack_loop, name="worker-acks", daemon=True),
            threading.Thread(target=self._renew_loop, name="worker-renew", daemon=True),
        ]
        dispatchers = [
            threading.Thread(
                target=self._dispatch, args=(self.handlers[q], slots, pool, once), name=f"claim-{q}"
            )
            for q in names
        ]
        log.info("worker started: queues %s, concurrency %d", ", ".join(names), self.concurrency)
        for thread in helpers + dispatchers:
            thread.start()
        try:
            for thread in dispatchers:
                while thread.is_alive():
                    thread.join(0.2)
        finally:
            self._stop.set()
            self._shutdown(slots, pool, loop_thread, helpers)

    def _dispatch(
        self, handler: _handlers.Handler, slots: _Slots, pool: _DaemonPool, once: bool
    ) -> None:
        """Claim in batches of up to `prefetch` jobs (renewed while they wait) and start
        them as the queue's concurrency allows: claims are few even when handlers are few."""
        queue = self.store.queue(handler.queue)
        listener = self.store.listen()
        wait = tenacity.wait_random_exponential(multiplier=0.1, max=10)
        prefetch = max(handler.concurrency, min(self.batch, 8 * handler.concurrency))
        waiting: deque[alkstore.Job[Any]] = deque()
        failures = 0
        try:
            while not self._stop.is_set():
                n = slots.take(handler.queue, len(waiting))
                for _ in range(n):
                    self._start(handler, waiting.popleft(), slots, pool)
                if len(waiting) > handler.concurrency:
                    slots.wait_free(handler.queue, self.poll)  # enough on hand
                    continue
                quiet = slots.busy[handler.queue] == 0 and not waiting  # nothing can retry
                try:
                    jobs = queue.claim_many(prefetch - len(waiting), visibility=self.visibility)
                    failures = 0
                except alkstore.StorageError as exc:
                    failures += 1
                    delay = wait(_attempt(failures))
                    log.warning(
                        "claim on %s failed (%s); retrying in %.1fs", handler.queue, exc, delay
                    )
                    self._stop.wait(delay)
                    continue
                self._hold(handler, jobs)
                waiting.extend(jobs)
                if not jobs and not waiting:
                    if once and quiet:
                        return
                    listener.wait(self.poll)
                elif not jobs:
                    slots.wait_free(handler.queue, self.poll)
        finally:
            self._release_waiting(waiting)

    def _hold(self, handler: _handlers.Handler, jobs: list[alkstore.Job[Any]]) -> None:
        now = time.monotonic()
        with self._lock:
            for job in jobs:
                self._running[job.id] = Running(job, handler, None, now)
        self.counters["claimed"] += len(jobs)

    def _release_waiting(self, waiting: deque[alkstore.Job[Any]]) -> None:
        """Give prefetched jobs back at once on stop (they never ran: no attempt counts)."""
        for job in waiting:
            with self._lock:
                self._running.pop(job.id, None)
            try:
                job.release()
                self.counters["returned"] += 1  # prefetched, never started
            except alkstore.AlkstoreError:
                pass  # its lease will run out instead

    def _start(
        self,
        handler: _handlers.Handler,
        job: alkstore.Job[Any],
        slots: _Slots,
        pool: _DaemonPool,
    ) -> None:
        with self._lock:
            running = self._running.get(job.id)
            if running is None or running.abandoned:  # its lease was lost while it waited
                self._running.pop(job.id, None)
                slots.give(job.queue)
                return
            running.started = time.monotonic()
        if handler.is_async:
            assert self._loop is not None
            asyncio.run_coroutine_threadsafe(self._run_async(handler, job, slots), self._loop)
        else:
            pool.submit(self._run_sync, handler, job, slots)

    def _run_sync(self, handler: _handlers.Handler, job: alkstore.Job[Any], slots: _Slots) -> None:
        started = time.monotonic()
        try:
            _handlers.decode_into(job, handler.payload_type)
            handler.fn(job)
            outcome: Outcome = ("ack", None, "")
        except Exception as exc:  # every failure becomes an outcome
            outcome = _classify(exc)
        self._complete(job, outcome, started, slots)

    async def _run_async(
        self, handler: _handlers.Handler, job: alkstore.Job[Any], slots: _Slots
    ) -> None:
        started = time.monotonic()
        scope: asyncio.Timeout | None = None
        try:
            _handlers.decode_into(job, handler.payload_type)
            result = handler.fn(job)
            assert asyncio.iscoroutine(result)
            async with asyncio.timeout(handler.timeout) as scope:
                await result
            outcome: Outcome = ("ack", None, "")
        except TimeoutError as exc:
            if scope is not None and scope.expired():
                outcome = ("timeout", None, f"timed out after {handler.timeout}s")
            else:
                outcome = _classify(exc)
        except Exception as exc:  # every failure becomes an outcome
            outcome = _classify(exc)
        await asyncio.to_thread(self._complete, job, outcome, started, slots)

    def _complete(
        self, job: alkstore.Job[Any], outcome: Outcome, started: float, slots: _Slots
    ) -> None:
        """Record a handler's outcome (acks are batched by the ack thread), then free its slot."""
        kind, delay, reason = outcome
        seconds = time.monotonic() - started
        try:
            with self._lock:
                running = self._running.pop(job.id, None)
                if running is None or running.abandoned:
                    return  # released, timed out or lost: someone else owns the job now
                if kind == "ack":
                    self._acks.append((job, seconds))
                    if len(self._acks) >= self.batch:
                        self._acks_ready.notify()
                    return
            kind = self._record(job, kind, delay, reason)
            self.counters[kind] += 1
            self._report(job, kind, seconds)
        finally:
            slots.give(job.queue)

    def _record(self, job: alkstore.Job[Any], kind: str, delay: float | None, reason: str) -> str:
        """Store a retry or a dead letter. Returns the outcome to count and report: the
        handler's (retry, timeout, fail, poison) or what happened instead (lease_lost,
        error). A job whose last attempt failed also counts as "dead"."""
        try:
            if kind in ("retry", "timeout") and job.attempt < job.max_attempts:
                job.retry(delay=delay, error=reason)
                log.warning(
                    "job %s#%d attempt %d: %s",
                    job.queue,
                    job.id,
                    job.attempt,
                    reason,
                    extra=_fields(job, kind, reason),
                )
                return kind
            if kind in ("retry", "timeout"):
                job.retry(error=reason)  # the last attempt: moves it to the dead letters
                self.counters["dead"] += 1
            else:
                job.fail(reason)
            log.error(
                "job %s#%d dead-lettered after attempt %d: %s",
                job.queue,
                job.id,
                job.attempt,
                reason,
                extra=_fields(job, "dead" if kind in ("retry", "timeout") else kind, reason),
            )
            return kind
        except alkstore.LeaseLost:
            return "lease_lost"
        except alkstore.StorageError as exc:
            log.warning("job %s#%d: could not record %s (%s)", job.queue, job.id, kind, exc)
            return "error"

    def _report(self, job: alkstore.Job[Any], kind: str, seconds: float) -> None:
        if self.on_outcome is None:
            return
        try:
            self.on_outcome(job, kind, seconds)
        except Exception:
            log.exception("the on_outcome hook raised; carrying on")

    # -- helpers: acks, lease renewal, maintenance -------------------------------------

    def _ack_loop(self) -> None:
        while True:
            with self._lock:
                if not self._acks:
                    self._acks_ready.wait(self.ack_flush)
                if len(self._acks) < self.batch:
                    self._acks_ready.wait(self.ack_flush)  # let a batch gather, briefly
                batch, self._acks = self._acks, []
            if batch:
                self._flush(batch)
            elif self._done.is_set():
                return

    def _flush(self, batch: list[tuple[alkstore.Job[Any], float]]) -> None:
        by_queue: dict[str, list[alkstore.Job[Any]]] = {}
        seconds = {job.id: took for job, took in batch}
        for job, _ in batch:
            by_queue.setdefault(job.queue, []).append(job)
        for name, jobs in by_queue.items():
            try:
                lost = self.store.queue(name).ack_many(jobs)
            except alkstore.StorageError as exc:
                log.warning("ack of %d jobs failed (%s); they will be re-delivered", len(jobs), exc)
                self.counters["error"] += len(jobs)
                continue
            self.counters["ack"] += len(jobs) - len(lost)
            self.counters["lease_lost"] += len(lost)
            debug = log.isEnabledFor(logging.DEBUG)
            for job in jobs:
                kind = "lease_lost" if job.id in lost else "ack"
                if debug:
                    log.debug("job %s#%d: %s", job.queue, job.id, kind, extra=_fields(job, kind))
                self._report(job, kind, seconds[job.id])

    def _renew_loop(self) -> None:
        next_maintenance = 0.0
        while not self._done.wait(0.1):  # renewal goes on through the grace period
            now = time.monotonic()
            with self._lock:
                running = list(self._running.values())
            for item in running:
                self._watch(item, now)
            if now >= next_maintenance:
                next_maintenance = now + self.maintenance_every
                try:
                    self.store.sweep()
                except alkstore.StorageError as exc:
                    log.warning("maintenance failed: %s", exc)

    def _watch(self, item: Running, now: float) -> None:
        job, handler = item.job, item.handler
        if item.abandoned:
            return
        try:
            if (
                handler.timeout is not None
                and not handler.is_async
                and item.started is not None
                and (now - item.started > handler.timeout)
            ):
                item.abandoned = True  # the thread runs on; its result is ignored
                kind = self._record(job, "timeout", None, f"timed out after {handler.timeout}s")
                self.counters[kind] += 1
                self._report(job, kind, now - (item.started or now))
            elif self.renew and now - item.renewed >= job.lease_ms / 3000:
                job.heartbeat()
                item.renewed = now
        except alkstore.LeaseLost:
            item.abandoned = True
            self.counters["lease_lost"] += 1
        except alkstore.StorageError as exc:
            log.warning("lease renewal of %s#%d failed: %s", job.queue, job.id, exc)

    def _start_loop(self) -> threading.Thread:
        loop = asyncio.new_event_loop()
        self._loop = loop
        thread = threading.Thread(target=loop.run_forever, name="worker-async", daemon=True)
        thread.start()
        return thread

    def _shutdown(
        self,
        slots: _Slots,
        pool: _DaemonPool,
        loop_thread: threading.Thread | None,
        helpers: list[threading.Thread],
    ) -> None:
        deadline = time.monotonic() + self.grace
        while self._running and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._lock:
            leftovers = [r for r in self._running.values() if not r.abandoned]
            for item in leftovers:
                item.abandoned = True
        for item in leftovers:
            try:
                item.job.release()
                self.counters["released"] += 1
            except alkstore.AlkstoreError:
                pass
        with self._lock:
            self._running.clear()
            self._done.set()
            self._acks_ready.notify_all()
        for thread in helpers:
            thread.join()
        pool.shutdown()
        if loop_thread is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            loop_thread.join()
            self._loop.close()
        log.info("worker stopped: %s", dict(self.counters))


def _fields(job: alkstore.Job[Any], outcome: str, reason: str = "") -> dict[str, Any]:
    """Structured fields on every per-job log record (`record.alkstore`)."""
    return {
        "alkstore": {
            "queue": job.queue,
            "job_id": job.id,
            "attempt": job.attempt,
            "max_attempts": job.max_attempts,
            "outcome": outcome,
            "reason": reason,
        }
    }


def _classify(exc: BaseException) -> Outcome:
    if isinstance(exc, _handlers.Retry):
        return ("retry", exc.delay, exc.reason)
    if isinstance(exc, _handlers.Fail):
        return ("fail", None, exc.reason)
    if isinstance(exc, alkstore.EventError):
        return ("poison", None, f"payload does not decode: {exc}")
    return ("retry", None, f"{type(exc).__name__}: {exc}")


def _attempt(n: int) -> tenacity.RetryCallState:
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    state.attempt_number = n
    return state
