"""Running a handler and settling its job, whatever way the handler ends.

Every ending (return, exception, `BaseException` such as `asyncio.CancelledError`
or `KeyboardInterrupt`, timeout) frees the handler's slot and settles its job:
an ack (batched), a retry on the backoff curve, a dead letter, or a release.
Nothing a handler does can kill the thread that ran it (issue 12, items 5, 10).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import alkstore
from relay import _handlers, _tracing
from relay.worker import _acks, _inflight, _slots
from relay.worker._fields import fields

log = logging.getLogger("alkstore.worker")
Outcome = tuple[str, float | None, str]  # (ack | retry | fail | poison | unknown, delay, reason)


class Outcomes:
    def __init__(
        self,
        store: alkstore.Store,
        inflight: _inflight.InFlight,
        counters: _inflight.Counters,
        acks: _acks.Acks,
        slots: _slots.Slots,
        report: Callable[[alkstore.Job[Any], str, float], None],
        unknown_type_grace: float,
    ) -> None:
        self._store = store
        self._inflight = inflight
        self._counters = counters
        self._acks = acks
        self._slots = slots
        self._report = report
        self._grace = unknown_type_grace

    def run_sync(self, item: _inflight.Running) -> None:
        started = time.monotonic()
        job = item.job
        span = _tracing.start(job)  # a span when OpenTelemetry records (ADR 0019)
        error: BaseException | None = None
        try:
            _handlers.decode_into(job, item.handler.payload_type)
            item.handler.fn(job)
            outcome: Outcome = ("ack", None, "")
        except BaseException as exc:  # every ending becomes an outcome; the thread lives on
            outcome, error = classify(exc), exc
        if span is not None:
            span.end(outcome[0], outcome[2], error)
        self.complete(item, outcome, started)

    async def run_async(self, item: _inflight.Running) -> None:
        started = time.monotonic()
        job, handler = item.job, item.handler
        span = _tracing.start(job)  # attached to this task's context
        error: BaseException | None = None
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
                outcome = classify(exc)
            error = exc
        except BaseException as exc:  # CancelledError included: the slot must be freed
            outcome, error = classify(exc), exc
        if span is not None:
            span.end(outcome[0], outcome[2], error)
        await asyncio.to_thread(self.complete, item, outcome, started)

    def complete(self, item: _inflight.Running, outcome: Outcome, started: float) -> None:
        """Settle a handler's outcome (acks are batched), then free its slot."""
        job = item.job
        kind, delay, reason = outcome
        seconds = time.monotonic() - started
        acked = job.acked  # job.transaction() acked it with the handler's writes (ADR 0022)
        try:
            if acked:
                self._inflight.pop(job)
                self._counters.add("ack", 1, job.queue)
                self._counters.timed(job.queue, (seconds,))
                self._report(job, "ack", seconds)
                return
            with self._inflight.lock:
                abandoned = item.abandoned
                if kind == "ack" and not abandoned:
                    item.finished = True  # held and renewed until the ack is stored
            if abandoned:  # released, timed out or lost: someone else owns the job now
                self._inflight.pop(job)
                return
            if kind == "ack":
                self._acks.ack(item, seconds)
                return
            self._inflight.pop(job)
            kind = self.record(job, kind, delay, reason)
            self._counters.add(kind, 1, job.queue)
            self._counters.timed(job.queue, (seconds,))
            self._report(job, kind, seconds)
        except Exception:  # never lose the slot, whatever went wrong
            log.exception("job %s#%d: settling its outcome failed", job.queue, job.id)
            self._counters.add("error", 1, job.queue)
        finally:
            self._slots.give(job.queue)
            if acked:  # its commit woke the claim loop while the slot was still taken:
                self._store.engine.wake.fire()  # wake it again (a drain ends at once)

    def record(self, job: alkstore.Job[Any], kind: str, delay: float | None, reason: str) -> str:
        """Store a retry, release or dead letter. Returns the outcome to count and report:
        the handler's (retry, timeout, fail, poison, unknown_type) or what happened instead
        (lease_lost, error). A job whose last attempt failed also counts as "dead"."""
        try:
            if kind == "snooze":  # back to waiting, the attempt not counted (ADR 0022)
                job.snooze(delay or 0.0)
                return "snoozed"
            if kind == "unknown":
                age = self._store.now() - job.enqueued_at.timestamp()
                if age < self._grace:  # a producer may be newer than this worker: wait
                    job.release(delay=min(30.0, max(1.0, self._grace / 10)))
                    log.warning(
                        "job %s#%d: %s; trying again later",
                        job.queue,
                        job.id,
                        reason,
                        extra=fields(job, "unknown_type", reason),
                    )
                    return "unknown_type"
                kind = "poison"
                reason = f"payload does not decode: {reason} (still after {self._grace:g}s)"
            if delay is not None and not (
                isinstance(delay, int | float) and math.isfinite(delay) and delay >= 0
            ):
                reason = f"{reason} (Retry delay {delay!r} is not >= 0: the backoff curve used)"
                delay = None
            if kind in ("retry", "timeout") and job.attempt < job.max_attempts:
                job.retry(delay=delay, error=reason)
                log.warning(
                    "job %s#%d attempt %d: %s",
                    job.queue,
                    job.id,
                    job.attempt,
                    reason,
                    extra=fields(job, kind, reason),
                )
                return kind
            if kind in ("retry", "timeout"):
                job.retry(error=reason)  # the last attempt: moves it to the dead letters
                self._counters.add("dead", 1, job.queue)
            else:
                job.fail(reason)
            log.error(
                "job %s#%d dead-lettered after attempt %d: %s",
                job.queue,
                job.id,
                job.attempt,
                reason,
                extra=fields(job, "dead" if kind in ("retry", "timeout") else kind, reason),
            )
            return kind
        except alkstore.LeaseLost:
            return "lease_lost"
        except alkstore.AlkstoreError as exc:
            log.warning(
                "job %s#%d: could not record %s (%s)",
                job.queue,
                job.id,
                kind,
                exc,
                extra=fields(job, "error", str(exc)),
            )
            return "error"


def classify(exc: BaseException) -> Outcome:
    if isinstance(exc, _handlers.Snooze):
        return ("snooze", exc.delay, "")
    if isinstance(exc, _handlers.Retry):
        return ("retry", exc.delay, exc.reason)
    if isinstance(exc, _handlers.Fail):
        return ("fail", None, exc.reason)
    if isinstance(exc, alkstore.UnknownEventType):
        return ("unknown", None, str(exc))  # retried for a grace: a producer may be newer
    if isinstance(exc, alkstore.EventError):
        return ("poison", None, f"payload does not decode: {exc}")
    return ("retry", None, f"{type(exc).__name__}: {exc}")
