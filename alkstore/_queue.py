"""Durable named queues, written once above the engines (docs/adr/0006).

Every operation is one named query from the engine's `sql/queues.sql`, run
atomically; times come from the store's clock in epoch milliseconds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from alkstore import (
    _backoff,
    _bulk,
    _checks,
    _config,
    _cursor,
    _effects,
    _encoding,
    _engine,
    _errors,
    _events,
    _jobs,
    _leases,
    _ops,
    _ordering,
    _queue_config,
    observe,
)

DEFAULT_MAX_PAYLOAD = _checks.DEFAULT_MAX_PAYLOAD
CONFIG_TTL = 5.0  # seconds a Queue object trusts the stored defaults it read
EXHAUSTED_EVERY = 1.0  # seconds between claim_many's looks for exhausted jobs to bury
DUE_LEVELS = 32  # priority levels next_due() probes; past them its answer is capped
DUE_UNSURE = 1.0  # seconds: next_due()'s cap when the queue holds more priority levels
CLAIM_LEVELS = 32  # priority levels a claim range-scans one by one; below them it walks
SWEEP_BATCH = 1_000  # rows per statement of the sweep (alkstore/_maintenance.py)


@dataclass
class Runtime:
    """What queues share with their store: engine, clock, random source, limits.

    `clock` None (the default): every time is the database's (ADR 0012); a clock is
    the tests' seam, and then it is the time of every statement."""

    engine: _engine.Engine
    clock: Callable[[], float] | None
    random: random.Random = field(default_factory=random.Random)
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD
    exhausted_checked: dict[str, float] = field(default_factory=dict)  # queue -> monotonic
    transaction: Callable[[], Any] = field(default=lambda: None)  # store.transaction (ADR 0022)

    def now_param(self) -> int | None:
        """The `now` of a query: None lets the database use its own clock."""
        return None if self.clock is None else int(self.clock() * 1000)

    def now_ms(self) -> int:
        """The time in epoch ms (a round trip when it is the database's)."""
        return self.engine.now_ms() if self.clock is None else int(self.clock() * 1000)


# The checks live in _checks (shared with the bulk path, _bulk); short names for this
# module's own use.
seconds = _checks.seconds
lease_ms = _checks.lease_ms
_whole = _checks.whole


class Queue(_ops.Operations):
    """A durable named queue. Get one with `store.queue(name)`. Its operator's half (info,
    jobs, get, cancel, retry, pause, resume, purge, dead letters) is in _ops and _dead."""

    _rt: Runtime

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.name = _config.check_name("queue", name)
        self._rt = runtime
        self._engine = runtime.engine
        self._config: _queue_config.QueueConfig | None = None
        self._config_read = 0.0
        postgres = self._engine.name == "postgres"
        self._claims = _cursor.Claims(self._engine) if postgres else None
        self._ordered_claims = _cursor.Claims(self._engine, cursor=False) if postgres else None

    # -- configuration ---------------------------------------------------------------

    def config(self, *, refresh: bool = False) -> _queue_config.QueueConfig:
        """The queue's stored defaults (the built-in ones if never configured).

        Cached for CONFIG_TTL seconds: a change made by another process applies here
        within that time."""
        now = time.monotonic()
        if self._config is None or refresh or now - self._config_read > CONFIG_TTL:
            self._config_read = now
            rows = self._engine.run("queue_config", {"queue": self.name})
            self._config = _queue_config.from_row(rows[0]) if rows else _queue_config.QueueConfig()
        return self._config

    def configure(
        self,
        *,
        max_attempts: int | None = None,
        backoff: _backoff.Backoff | None = None,
        visibility: float | None = None,
        dead_retention: float | None = None,
        ordered: bool | None = None,
        on_head_failure: _ordering.HeadPolicy | None = None,
        concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate_limit: int | None = None,
        rate_period: float | None = None,
        key_rate_limit: int | None = None,
    ) -> _queue_config.QueueConfig:
        """Store new defaults for this queue (unspecified ones keep their value).

        `ordered`: hand out the jobs of each key one at a time, in enqueue order (the
        event key of relayed jobs, `group=` of direct ones; applies to jobs enqueued
        from then on); `on_head_failure`: "block", "dead_letter" or "park", what a key
        does when its head fails (docs/adr/0021, alkstore/_ordering.py).

        Cluster-wide limits, enforced by the database when jobs are claimed (0 removes
        one): `concurrency`, the most jobs of the queue leased at once across every
        process; `key_concurrency`, the most per job key; `rate_limit`, the most jobs
        started per `rate_period` seconds (default 1); `key_rate_limit`, the same per
        job key."""
        current = self.config(refresh=True)
        new = _queue_config.changed(
            current,
            max_attempts=max_attempts,
            backoff=backoff,
            visibility=visibility,
            dead_retention=dead_retention,
            ordered=ordered,
            on_head_failure=on_head_failure,
            concurrency=concurrency,
            key_concurrency=key_concurrency,
            rate_limit=rate_limit,
            rate_period=rate_period,
            key_rate_limit=key_rate_limit,
        )
        self._engine.run("queue_configure", _queue_config.stored(self.name, new))
        self._config = new
        return new

    # -- producing -------------------------------------------------------------------

    @overload
    def enqueue(
        self, payload: object, *, on_duplicate: Literal["raise"] = ..., **options: Any
    ) -> int: ...
    @overload
    def enqueue(
        self, payload: object, *, on_duplicate: Literal["ignore"], **options: Any
    ) -> int | None: ...
    @overload
    def enqueue(
        self, payload: object, *, on_duplicate: Literal["replace"], **options: Any
    ) -> int: ...
    def enqueue(
        self, payload: object, *, on_duplicate: _encoding.OnDuplicate = "raise", **options: Any
    ) -> int | None:
        """Enqueue one job in its own transaction; returns its id (None: ignored duplicate).

        Options: delay / run_at, priority, max_attempts, backoff, expires, dedupe_key,
        headers. Inside a business transaction use `tx.enqueue(queue, ...)` instead.
        """
        if options:
            params = _encoding.enqueue_params(self._rt, self.name, payload, **options)
        else:  # the common case: no option to check, and the name was checked once
            params = _encoding.plain_params(self._rt, self.name, payload)
        if on_duplicate == "replace":  # debounce / replace (ADR 0022)
            with self._engine.transaction() as conn:
                job_id: int | None = _effects.replace_in(self._engine, conn, params)
        else:
            rows = self._engine.run(_encoding.enqueue_query(params), params)
            job_id = _encoding.check_duplicate(rows, params, on_duplicate)
        self._engine.committed()
        if observe.counts is not None and job_id is not None:
            observe.counts.enqueued(self._engine.namespace, self.name, 1)
        return job_id

    def enqueue_many(
        self,
        items: Iterable[object],
        *,
        on_duplicate: _encoding.OnDuplicate = "raise",
        **options: Any,
    ) -> list[int | None]:
        """Enqueue several jobs in one transaction; their ids in input order (None: an
        ignored duplicate). On PostgreSQL a batch goes through COPY (docs/adr/0013).

        Options (as `enqueue`, `group=` too) apply to every job; an item may be an
        `alkstore.JobSpec(payload, delay=..., priority=..., dedupe_key=..., group=...,
        max_attempts=...)` whose own options win. Dedupe keys are decided in input
        order: a later job with the key of an earlier one is a duplicate."""
        ids = _bulk.enqueue_many(
            self._engine,
            self.name,
            items,
            now=self._rt.now_param(),
            limit=self._rt.max_payload_bytes,
            on_duplicate=on_duplicate,
            options=options,
        )
        if observe.counts is not None:
            observe.counts.enqueued(self._engine.namespace, self.name, len(ids) - ids.count(None))
        return ids

    # -- consuming -------------------------------------------------------------------

    def claim(self, visibility: float | None = None) -> _jobs.Job[Any] | None:
        """Claim the next visible job for `visibility` seconds, or None if there is none."""
        jobs = self.claim_many(1, visibility=visibility)
        return jobs[0] if jobs else None

    def claim_many(
        self, n: int, visibility: float | None = None, *, start: int | None = None
    ) -> list[_jobs.Job[Any]]:
        """Claim up to n jobs: highest priority first, then run time, then enqueue order.

        `start` (default: all n): how many of them start now and count an attempt; the
        rest are prefetched, leased but not started, until `Job.mark_started()` and
        `start_many` (the worker runtime's prefetch; ADR 0012). A row that cannot be
        made into a Job (headers written by hand that are not {str: str}) is moved to
        the dead letters with the reason instead of being handed out."""
        _whole("n", n, 1, 100_000)
        start = n if start is None else _whole("start", start, 0, n)
        if visibility is None:
            visibility = self.config().visibility
        lease = lease_ms("visibility", visibility)
        params = {
            "queue": self.name,
            "now": self._rt.now_param(),
            "lease_ms": lease,
            "n": start or n,
            "go": 1 if start else 0,
            "levels": CLAIM_LEVELS,
        }
        # Two plain claims when some start and some are prefetched: the started ones are
        # first in claim order. (One statement that ranks the rows with a window cost
        # SQLite 5-7 us more per claimed job: the worker's whole margin.)
        query = "claim"
        config = self.config()
        if config.limited:  # the limits' own claim (docs/adr/0021)
            query = _ordering.limited_query(config)
            _ordering.limit_params(params, config, n)
        claim = self._engine.run
        if config.key_rate_limit:  # the keys' windows count in the claim's transaction
            claim = _ordering.KeyCounted(self._engine)
        elif query == "claim" and self._claims is not None and self._ordered_claims is not None:
            # (an ordered queue's next job comes back at its old run time: behind a cursor,
            # so its claims never use one; docs/adr/0027, alkstore/_cursor.py)
            claim = (self._ordered_claims if config.ordered else self._claims).run
        rows = claim(query, params)
        if 0 < start < n and len(rows) == start:
            params.update(n=n - start, go=0)
            rows += claim(query, params)
        jobs: list[_jobs.Job[Any]] = []
        for row in rows:
            try:  # Job(...), not Job[Any](...): a subscripted generic costs a setattr per job
                jobs.append(_jobs.Job(self, row))
            except _errors.EventError as exc:
                self._bury_row(row, exc)
        jobs.sort(key=lambda job: (-job.priority, job.due_ms, job.id))  # RETURNING is unordered
        self._bury_exhausted()
        return jobs

    def next_due(self) -> float | None:
        """Seconds until this queue's next job falls due, by the database's clock (0.0: one
        is due now), or None when no job waits for a time: an idle worker sleeps that long
        (ADR 0008 addendum 2026-12-01).

        Due: a delayed or retried job at its run time, a leased job when its lease runs
        out. One probe of the claim index per priority level: a queue holding jobs at more
        than DUE_LEVELS priorities is probed at its highest ones only, and then the answer
        is at most DUE_UNSURE seconds."""
        params = {"queue": self.name, "now": self._rt.now_param(), "levels": DUE_LEVELS}
        ms, more = self._engine.run("next_due", params)[0]
        if more:
            ms = DUE_UNSURE * 1000 if ms is None else min(ms, DUE_UNSURE * 1000)
        return None if ms is None else max(0.0, ms / 1000)

    def _bury_row(self, row: tuple[Any, ...], exc: Exception) -> None:
        """Dead-letter a claimed row that does not decode (it never reaches a handler)."""
        job_id, token, attempts, started = row[0], row[7], row[4], row[-1]
        reason = _checks.reason(f"job does not decode: {exc}")
        params = {
            "id": job_id,
            "token": token,
            "attempts": attempts if started else attempts + 1,
            "reason": reason,
            "now": self._rt.now_param(),
        }
        self._engine.run("bury", params)

    def _bury_exhausted(self) -> None:
        """Dead-letter exhausted jobs (their last lease ran out) at most once a second per
        queue and store: an application that only calls claim() buries them too."""
        now = time.monotonic()
        checked = self._rt.exhausted_checked
        if now - checked.get(self.name, -EXHAUSTED_EVERY) < EXHAUSTED_EVERY:
            return
        checked[self.name] = now
        params = {"now": self._rt.now_param(), "batch": SWEEP_BATCH}
        self._engine.run("sweep_exhausted", params)

    def start_many(self, jobs: Sequence[_jobs.Job[Any]]) -> None:
        """Record that prefetched jobs started (their attempts count); see claim_many."""
        if jobs:
            self._engine.run("start_many", _leases.batch_of(self._engine.name, jobs))

    def ack_many(self, jobs: Sequence[_jobs.Job[Any]]) -> list[int]:
        """Acknowledge several jobs in one statement; returns the ids whose lease was lost."""
        if not jobs:
            return []
        params = _leases.batch_of(self._engine.name, jobs)
        done = {row[0] for row in self._engine.run("ack_many", params)}
        if done and self.config().ordered:
            self._engine.committed()  # the keys' next jobs are due: wake their claimers
        return [job.id for job in jobs if job.id not in done]

    def _checked(self, job: _jobs.Job[Any], operation: str, name: str, **params: Any) -> None:
        params.update(id=job.id, token=job.lease_token, now=self._rt.now_param())
        if not self._engine.run(name, params):
            job.lease_lost = True
            raise _errors.LeaseLost(job.id, operation)

    def _ack(self, job: _jobs.Job[Any]) -> None:
        self._checked(job, "ack", "ack")
        if job.key is not None and self.config().ordered:
            self._engine.committed()  # the key's next job is due: wake its claimers

    def _retry(self, job: _jobs.Job[Any], delay: float | None, error: str | None) -> None:
        error = "retry requested" if error is None else _checks.reason(error)
        if delay is not None:
            seconds("delay", delay)  # checked even when this attempt was the last
        policy = _ordering.policy_of(self, job)
        if job.attempt >= job.max_attempts or policy == "dead_letter":
            self._bury(job, error)
            return
        if delay is None:
            curve = _backoff.decode(job._backoff) if job._backoff else self.config().backoff
            delay = curve.seconds(job.attempt, self._rt.random)
        delay_ms = int(seconds("delay", delay) * 1000)
        self._checked(job, "retry", "retry", delay_ms=delay_ms, attempts=job.attempt, error=error)
        self._engine.committed()

    def _release(self, job: _jobs.Job[Any], delay: float, operation: str = "release") -> None:
        delay_ms = int(seconds("delay", delay) * 1000)
        attempts = job.attempt - 1 if job.started else job.attempt
        self._checked(job, operation, "release", delay_ms=delay_ms, attempts=attempts)
        self._engine.committed()

    def _bury(self, job: _jobs.Job[Any], reason: str) -> None:
        reason = _checks.reason(reason)
        if _ordering.policy_of(self, job) == "park":  # the key waits for an operator
            _ordering.park(self, job, reason)
            return
        self._checked(job, "fail", "bury", attempts=job.attempt, reason=reason)
        if job.key is not None and self.config().ordered:
            self._engine.committed()  # the key's next job is due

    def _heartbeat(self, job: _jobs.Job[Any], progress: Any, extend: float | None) -> None:
        lease = job.lease_ms if extend is None else lease_ms("extend", extend)
        encoded = None if progress is None else _events.codec.encode_value(progress)
        self._checked(job, "heartbeat", "heartbeat", lease_ms=lease, progress=encoded)

    def unpark(self, key: str, *, drop: bool = False, reason: str | None = None) -> int | None:
        """Release a key parked by the "park" policy (docs/adr/0021): its head is due
        again now with its attempts back, or with `drop=True` goes to the dead letters
        (`reason`) and the key goes on. Returns the head's id; None: not parked."""
        return _ordering.unpark(self, key, drop=drop, reason=reason)

    def parked(self) -> dict[str, int]:
        """The keys the "park" policy stopped, each with its head's id, in key order."""
        return _ordering.parked(self)

    # -- stats ---------------------------------------------------------------------

    def stats(self) -> _jobs.QueueStats:
        ready, scheduled, active, dead, oldest_ms = self._engine.run(
            "stats", {"queue": self.name, "now": self._rt.now_param()}
        )[0]
        age = None if oldest_ms is None else max(0.0, oldest_ms / 1000)
        return _jobs.QueueStats(ready, scheduled, active, dead, age)

    def __repr__(self) -> str:
        return f"<alkstore.Queue {self.name!r}>"
