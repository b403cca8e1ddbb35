"""One claim loop per queue: claim a prefetch, start jobs as the queue's slots free up.

A claim reserves the slots that are free first and starts that many of the jobs
at once (their attempts count in the claim); the rest wait prefetched, leased
but not started, and count their attempt when they start (recorded with the next
ack flush). A worker killed with prefetched jobs burns no attempt of a job that
never started (ADR 0012).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

import tenacity

import alkstore
from relay import _handlers
from relay.worker import _acks, _due, _inflight, _outcomes, _slots

log = logging.getLogger("alkstore.worker")
ONCE_ATTEMPTS = 5  # claim failures in a row that end a `once` drain (about 3 s of backoff)


@dataclass
class Context:
    """What every dispatcher shares with its worker."""

    store: alkstore.Store
    inflight: _inflight.InFlight
    counters: _inflight.Counters
    acks: _acks.Acks
    outcomes: _outcomes.Outcomes
    slots: _slots.Slots
    pool: _slots.DaemonPool
    loop: asyncio.AbstractEventLoop | None
    stop: threading.Event
    batch: int
    visibility: float | None
    poll: float


class Dispatcher:
    def __init__(self, ctx: Context, handler: _handlers.Handler, once: bool) -> None:
        self._ctx = ctx
        self._handler = handler
        self._once = once
        self._waiting: deque[_inflight.Running] = deque()
        self.queue = handler.queue
        self.gave_up: alkstore.StorageError | None = None  # the error that ended a drain

    def run(self) -> None:
        ctx, handler, name = self._ctx, self._handler, self._handler.queue
        queue = ctx.store.queue(name)
        listener = ctx.store.listen()
        timer = _due.DueTimer(queue)
        wait = tenacity.wait_random_exponential(multiplier=0.1, max=10)
        prefetch = max(handler.concurrency, min(ctx.batch, 8 * handler.concurrency))
        waiting = self._waiting
        failures = 0
        try:
            while not ctx.stop.is_set():
                n = ctx.slots.take(name, len(waiting))
                if n:
                    self._start_waiting([waiting.popleft() for _ in range(n)])
                if len(waiting) > handler.concurrency or len(waiting) >= prefetch:
                    ctx.slots.wait_free(name, ctx.poll)  # enough on hand
                    continue
                quiet = ctx.slots.busy[name] == 0 and not waiting  # nothing can retry
                want = prefetch - len(waiting)
                free = ctx.slots.take(name, want)  # these start at once
                try:
                    jobs = queue.claim_many(want, visibility=ctx.visibility, start=free)
                    failures = 0
                except alkstore.StorageError as exc:
                    ctx.slots.give(name, free)
                    ctx.counters.add("reconnect", 1, name)
                    failures += 1
                    if isinstance(exc, alkstore.PermanentError):  # no retry fixes it
                        log.error("claim on %s failed (%s); stopping the worker", name, exc)
                        self.gave_up = exc
                        ctx.stop.set()
                        return
                    if self._once and failures >= ONCE_ATTEMPTS:
                        log.error("claim on %s failed %d times (%s); ending", name, failures, exc)
                        self.gave_up = exc
                        ctx.stop.set()  # the drain cannot finish: every queue stops
                        return
                    delay = wait(_attempt(failures))
                    log.warning("claim on %s failed (%s); retrying in %.1fs", name, exc, delay)
                    ctx.stop.wait(delay)
                    continue
                now = time.monotonic()
                items = [_inflight.Running(job, handler, now) for job in jobs]
                ctx.inflight.add(items)
                ctx.counters.add("claimed", len(items), name)
                go = [item for item in items if item.job.started]
                ctx.slots.give(name, free - len(go))
                for item in go:
                    item.started = now
                    self._run(item)
                waiting.extend(item for item in items if not item.job.started)
                if not jobs and not waiting:
                    if self._once and quiet and not _acks_pending(ctx, queue):
                        return
                    listener.wait(timer.timeout(ctx.poll))  # a due job wakes it too
                elif not jobs:
                    ctx.slots.wait_free(name, ctx.poll)
        finally:
            self._release_waiting()

    def _start_waiting(self, items: list[_inflight.Running]) -> None:
        """Start prefetched jobs (a slot each is taken); their attempts count now."""
        ctx, now = self._ctx, time.monotonic()
        go = []
        with ctx.inflight.lock:
            for item in items:
                if item.abandoned:  # its lease was lost while it waited
                    ctx.slots.give(item.job.queue)
                    continue
                item.job.mark_started()  # recorded by the lease keeper if it runs long
                item.started = now
                go.append(item)
        for item in go:
            self._run(item)

    def _run(self, item: _inflight.Running) -> None:
        ctx = self._ctx
        if item.handler.is_async:
            assert ctx.loop is not None
            item.task = asyncio.run_coroutine_threadsafe(ctx.outcomes.run_async(item), ctx.loop)
        else:
            ctx.pool.submit(ctx.outcomes.run_sync, item)

    def _release_waiting(self) -> None:
        """Give prefetched jobs back at once on stop (they never started: no attempt)."""
        ctx = self._ctx
        while self._waiting:
            item = self._waiting.popleft()
            if ctx.inflight.pop(item.job) is None or item.abandoned:
                continue
            try:
                item.job.release()
                ctx.counters.add("returned", 1, item.job.queue)  # prefetched, never started
            except alkstore.AlkstoreError:
                pass  # its lease will run out instead; no attempt was counted


def _acks_pending(ctx: Context, queue: alkstore.Queue) -> bool:
    """An ordered queue's drain (`once`) is not over while acks wait to be flushed: each
    ack makes its key's next job claimable (docs/adr/0021)."""
    return bool(len(ctx.inflight)) and queue.config().ordered


def _attempt(n: int) -> tenacity.RetryCallState:
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    state.attempt_number = n
    return state
