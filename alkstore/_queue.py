"""Durable named queues, written once above the engines (docs/adr/0006).

Every operation is one named query from the engine's `sql/queues.sql`, run
atomically; times come from the store's clock in epoch milliseconds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, overload

import msgspec

from alkstore import (
    _backoff,
    _bulk,
    _checks,
    _config,
    _cursor,
    _effects,
    _engine,
    _errors,
    _events,
    _jobs,
    _leases,
    _ops,
    _ordering,
    _sql,
    _tracing,
    observe,
)

DEFAULT_MAX_ATTEMPTS = _sql.DEFAULT_MAX_ATTEMPTS  # one value, the SQL's too
DEFAULT_VISIBILITY = _checks.DEFAULT_VISIBILITY
DEFAULT_MAX_PAYLOAD = _checks.DEFAULT_MAX_PAYLOAD
CONFIG_TTL = 5.0  # seconds a Queue object trusts the stored defaults it read
EXHAUSTED_EVERY = 1.0  # seconds between claim_many's looks for exhausted jobs to bury
DUE_LEVELS = 32  # priority levels next_due() probes; past them its answer is capped
DUE_UNSURE = 1.0  # seconds: next_due()'s cap when the queue holds more priority levels
CLAIM_LEVELS = 32  # priority levels a claim range-scans one by one; below them it walks
SWEEP_BATCH = 1_000  # rows per statement of the sweep (alkstore/_maintenance.py)
_INT32 = _checks.INT32
_encode = msgspec.json.Encoder().encode


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


class Encoding(Protocol):
    """What encoding a job needs: a Runtime, or `alkstore.enqueue`'s settings on a
    connection the application owns (alkstore/_append.py)."""

    @property
    def clock(self) -> Callable[[], float] | None: ...
    @property
    def max_payload_bytes(self) -> int: ...


class QueueConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Per-queue defaults, stored in the database so every process uses the same."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: _backoff.Backoff = _backoff.DEFAULT_BACKOFF
    visibility: float = DEFAULT_VISIBILITY
    dead_retention: float | None = None
    ordered: bool = False  # per-key ordered delivery (docs/adr/0021)
    on_head_failure: _ordering.HeadPolicy = "block"
    concurrency: int | None = None  # cluster-wide limits (docs/adr/0021); None: none
    key_concurrency: int | None = None
    rate_limit: int | None = None  # starts per rate_period seconds
    rate_period: float = 1.0
    key_rate_limit: int | None = None  # starts per rate_period per job key

    @property
    def limited(self) -> bool:
        return bool(
            self.concurrency or self.key_concurrency or self.rate_limit or self.key_rate_limit
        )


# The checks live in _checks (shared with the bulk path, _bulk); these names stay for
# the modules that use them through _queue.
seconds = _checks.seconds
lease_ms = _checks.lease_ms
encode_payload = _checks.encode_payload
_whole = _checks.whole
_instant_ms = _checks.instant_ms


def plain_params(runtime: Encoding, queue: str, payload: object) -> dict[str, Any]:
    """One job with every option at its default (the hot path: `queue` already checked).
    Times are relative to the statement's `now` (the database's, ADR 0012)."""
    clock = runtime.clock
    type_name, raw = encode_payload(payload, runtime.max_payload_bytes)
    return {
        "queue": queue,
        "priority": 0,
        "run_at": None,
        "delay_ms": 0,
        "now": None if clock is None else int(clock() * 1000),
        "expires_at": None,
        "expires_ms": None,
        "max_attempts": None,
        "backoff": None,
        "dedupe_key": None,
        "type": type_name,
        "key": None,
        "position": None,
        "headers": _tracing.encoded(),  # the current span's trace context (ADR 0019)
        "payload": raw,
    }


def enqueue_params(
    runtime: Encoding,
    queue: str,
    payload: object,
    *,
    delay: float | None = None,
    run_at: datetime | float | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    backoff: _backoff.Backoff | None = None,
    expires: datetime | float | None = None,
    dedupe_key: str | None = None,
    headers: dict[str, str] | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """Validate and encode one job; raises before anything touches the database.
    `group`: the job's key, which orders it behind the older jobs of that key when the
    queue is ordered (docs/adr/0021)."""
    _config.check_name("queue", queue)
    if delay is not None and run_at is not None:
        raise _errors.InvalidArgument("pass delay or run_at, not both")
    _checks.dedupe_key(dedupe_key)
    params = plain_params(runtime, queue, payload)
    if delay is not None:
        params["delay_ms"] = int(seconds("delay", delay) * 1000)
    elif run_at is not None:
        params["run_at"] = _instant_ms("run_at", run_at)  # epoch seconds or a datetime
    params["priority"] = _whole("priority", priority, -_INT32)
    if isinstance(expires, datetime):
        params["expires_at"] = _instant_ms("expires", expires)
    elif expires is not None:
        params["expires_ms"] = int(seconds("expires", expires) * 1000)
    if max_attempts is not None:
        params["max_attempts"] = _whole("max_attempts", max_attempts, 1)
    if backoff is not None:
        params["backoff"] = _backoff.encode(backoff)
    params["dedupe_key"] = dedupe_key
    if group is not None:
        params["key"] = _ordering.check_group(group)
    encoded_headers = _events.codec.encode_headers(_tracing.merged(headers) if headers else None)
    if encoded_headers:
        params["headers"] = encoded_headers.decode()
    return params


OnDuplicate = _bulk.OnDuplicate


def enqueue_query(params: dict[str, Any]) -> str:
    """The named query for one job: the ON CONFLICT form only when there is a dedupe key."""
    return "enqueue" if params["dedupe_key"] is None else "enqueue_dedupe"


def check_duplicate(
    rows: list[tuple[Any, ...]], params: dict[str, Any], on_duplicate: OnDuplicate
) -> int | None:
    if rows:
        return int(rows[0][0])
    if on_duplicate == "ignore":
        return None
    raise _errors.DuplicateJob(params["queue"], params["dedupe_key"])


class Queue(_ops.Operations):
    """A durable named queue. Get one with `store.queue(name)`. Its operator's half (info,
    jobs, get, cancel, retry, pause, resume, purge, dead letters) is in _ops and _dead."""

    _rt: Runtime

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.name = _config.check_name("queue", name)
        self._rt = runtime
        self._engine = runtime.engine
        self._config: QueueConfig | None = None
        self._config_read = 0.0
        postgres = self._engine.name == "postgres"
        self._claims = _cursor.Claims(self._engine) if postgres else None
        self._ordered_claims = _cursor.Claims(self._engine, cursor=False) if postgres else None

    # -- configuration ---------------------------------------------------------------

    def config(self, *, refresh: bool = False) -> QueueConfig:
        """The queue's stored defaults (the built-in ones if never configured).

        Cached for CONFIG_TTL seconds: a change made by another process applies here
        within that time."""
        now = time.monotonic()
        if self._config is None or refresh or now - self._config_read > CONFIG_TTL:
            self._config_read = now
            rows = self._engine.run("queue_config", {"queue": self.name})
            if rows:
                attempts, backoff, visibility_ms, retention_ms, ordered, policy = rows[0][:6]
                limit, key_limit, rate, period_ms, key_rate = rows[0][6:]
                self._config = QueueConfig(
                    max_attempts=attempts,
                    backoff=_backoff.decode(backoff),
                    visibility=visibility_ms / 1000,
                    dead_retention=None if retention_ms is None else retention_ms / 1000,
                    ordered=bool(ordered),
                    on_head_failure=policy,
                    concurrency=limit,
                    key_concurrency=key_limit,
                    rate_limit=rate,
                    rate_period=1.0 if period_ms is None else period_ms / 1000,
                    key_rate_limit=key_rate,
                )
            else:
                self._config = QueueConfig()
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
    ) -> QueueConfig:
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
        new = QueueConfig(
            max_attempts=current.max_attempts
            if max_attempts is None
            else _whole("max_attempts", max_attempts, 1),
            backoff=current.backoff if backoff is None else backoff,
            visibility=current.visibility
            if visibility is None
            else lease_ms("visibility", visibility) / 1000,
            dead_retention=current.dead_retention
            if dead_retention is None
            else seconds("dead_retention", dead_retention, positive=True),
            ordered=current.ordered if ordered is None else bool(ordered),
            on_head_failure=current.on_head_failure
            if on_head_failure is None
            else _ordering.check_policy(on_head_failure),
            concurrency=_ordering.limit("concurrency", concurrency, current.concurrency),
            key_concurrency=_ordering.limit(
                "key_concurrency", key_concurrency, current.key_concurrency
            ),
            rate_limit=_ordering.limit("rate_limit", rate_limit, current.rate_limit),
            rate_period=current.rate_period
            if rate_period is None
            else lease_ms("rate_period", rate_period) / 1000,
            key_rate_limit=_ordering.limit(
                "key_rate_limit", key_rate_limit, current.key_rate_limit
            ),
        )
        self._engine.run(
            "queue_configure",
            {
                "queue": self.name,
                "max_attempts": new.max_attempts,
                "backoff": _backoff.encode(new.backoff),
                "visibility_ms": round(new.visibility * 1000),
                "dead_retention_ms": None
                if new.dead_retention is None
                else int(new.dead_retention * 1000),
                "ordered": new.ordered,
                "head_policy": new.on_head_failure,
                "limit": new.concurrency,
                "key_limit": new.key_concurrency,
                "rate": new.rate_limit,
                "period": round(new.rate_period * 1000),
                "key_rate": new.key_rate_limit,
            },
        )
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
        self, payload: object, *, on_duplicate: OnDuplicate = "raise", **options: Any
    ) -> int | None:
        """Enqueue one job in its own transaction; returns its id (None: ignored duplicate).

        Options: delay / run_at, priority, max_attempts, backoff, expires, dedupe_key,
        headers. Inside a business transaction use `tx.enqueue(queue, ...)` instead.
        """
        if options:
            params = enqueue_params(self._rt, self.name, payload, **options)
        else:  # the common case: no option to check, and the name was checked once
            params = plain_params(self._rt, self.name, payload)
        if on_duplicate == "replace":  # debounce / replace (ADR 0022)
            with self._engine.transaction() as conn:
                job_id: int | None = _effects.replace_in(self._engine, conn, params)
        else:
            rows = self._engine.run(enqueue_query(params), params)
            job_id = check_duplicate(rows, params, on_duplicate)
        self._engine.committed()
        if observe.counts is not None and job_id is not None:
            observe.counts.enqueued(self._engine.namespace, self.name, 1)
        return job_id

    def enqueue_many(
        self,
        items: Iterable[object],
        *,
        on_duplicate: OnDuplicate = "raise",
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
