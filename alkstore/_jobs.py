"""What a queue hands out: jobs with their lease, and dead letters with their history."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import msgspec

from alkstore import _effects, _errors, _events, _txack

if TYPE_CHECKING:
    from alkstore._queue import Queue

T = TypeVar("T")

_any_json = msgspec.json.Decoder()


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def decode_payload(type_name: str | None, raw: str | bytes) -> Any:
    """An Event when the job carries an event type, else the plain JSON value."""
    if type_name is not None:
        return _events.codec.decode(type_name, raw)
    return _any_json.decode(raw)


class Attempt(msgspec.Struct, frozen=True):
    """One ended attempt in a job's history."""

    attempt: int
    error: str
    at: int  # epoch milliseconds

    @property
    def time(self) -> datetime:
        return from_ms(self.at)


_history = msgspec.json.Decoder(list[Attempt])


class Job(Generic[T]):
    """A claimed job. Finish it with ack, retry or fail; heartbeat to keep the lease.

    Every operation carries the lease token of this claim: once the lease has
    expired and the job was claimed again, they raise LeaseLost and change nothing.
    """

    __slots__ = (
        "__dict__",
        "_backoff",
        "_enqueued_ms",
        "_progress",
        "_queue",
        "attempt",
        "due_ms",
        "headers",
        "id",
        "key",
        "lease_lost",
        "lease_ms",
        "lease_token",
        "max_attempts",
        "position",
        "priority",
        "queue",
        "raw",
        "started",
        "type",
    )

    acked: bool = False
    """True once `job.transaction()` committed: the job was acked with the block's writes."""

    def __init__(self, queue: Queue, row: tuple[Any, ...]) -> None:
        (
            self.id,
            self.queue,
            self.priority,
            self.due_ms,
            self.attempt,
            self.max_attempts,
            self._backoff,
            self.lease_token,
            self.lease_ms,
            self._enqueued_ms,
            self.type,
            self.key,
            self.position,
            headers,
            self.raw,
            self._progress,
            started,
        ) = row
        self.started = bool(started)
        self.lease_lost = False
        """True once this claim's lease is known to be lost (an operation raised LeaseLost,
        or the worker's renewal found it taken): a long handler may check it and stop."""
        self._queue = queue
        self.headers: dict[str, str] = _events.codec.decode_headers(headers)

    @cached_property
    def enqueued_at(self) -> datetime:
        """When the job was enqueued (made on first access: claims make many jobs)."""
        return from_ms(self._enqueued_ms)

    @cached_property
    def payload(self) -> T:
        """The payload, decoded on first access (an Event for event jobs)."""
        value: T = decode_payload(self.type, self.raw)
        return value

    @cached_property
    def raw_payload(self) -> Any:
        """The stored JSON as Python builtins: readable without the event's class."""
        return _any_json.decode(self.raw)

    @property
    def progress(self) -> Any:
        """The progress stored by the last heartbeat (None if none)."""
        return _any_json.decode(self._progress) if self._progress else None

    def ack(self) -> None:
        """The job is done: delete it."""
        self._queue._ack(self)

    def transaction(self) -> _txack.JobTransaction:
        """A store transaction that also acks this job (ADR 0022): `with job.transaction()
        as tx:` make the handler's writes on `tx.connection`, `tx.enqueue` / `tx.append`
        follow-up work; when the block ends, the ack (fenced by this claim's lease token)
        commits with them. A lease that was lost rolls everything back and raises
        LeaseLost; an exception in the block rolls back and leaves the job held."""
        inner: Any = self._queue._rt.transaction()
        return _txack.JobTransaction(self, inner)

    def retry(self, delay: float | None = None, error: str | None = None) -> None:
        """Run it again after `delay` seconds (None: the backoff curve); dead-letters it
        instead when this was the last attempt."""
        self._queue._retry(self, delay, error)

    def fail(self, reason: str) -> None:
        """Give up now: move the job to the dead letters with `reason`."""
        self._queue._bury(self, reason)

    def release(self, delay: float = 0) -> None:
        """Give the job back unprocessed: visible after `delay` seconds, and this attempt
        does not count (a worker shutting down gracefully; ADR 0008)."""
        self._queue._release(self, delay)

    def check(self) -> None:
        """Raise LeaseLost (and set `lease_lost`) unless this claim still holds the job:
        a long handler calls it between steps to stop early once the job was cancelled
        (`queue.cancel(..., force=True)`) or taken over (ADR 0022). A read, no write."""
        if self.acked or not _effects.holds(self._queue._engine, self.id, self.lease_token):
            self.lease_lost = not self.acked
            raise _errors.LeaseLost(self.id, "check")

    def snooze(self, delay: float) -> None:
        """Put the job back to wait `delay` seconds (>= 0) without counting this attempt
        (ADR 0022): not a failure, no history entry, no backoff; the lease ends. A job
        that snoozes for ever never runs out of attempts."""
        self._queue._release(self, delay, "snooze")

    def mark_started(self) -> None:
        """For runtimes that prefetch (`claim_many(start=...)`): this job starts now, so
        its attempt counts; record it in the database with `Queue.start_many`."""
        if not self.started:
            self.started = True
            self.attempt += 1

    def heartbeat(self, progress: Any = None, extend: float | None = None) -> None:
        """Renew the lease (by `extend` seconds, default the claim's visibility) and store
        optional progress."""
        self._queue._heartbeat(self, progress, extend)

    def __repr__(self) -> str:
        return f"<Job {self.queue}#{self.id} attempt {self.attempt}/{self.max_attempts}>"


class DeadLetter:
    """A job that failed for good, with the history of its attempts."""

    __slots__ = (
        "__dict__",
        "attempts",
        "died_at",
        "enqueued_at",
        "headers",
        "history",
        "id",
        "key",
        "max_attempts",
        "position",
        "priority",
        "queue",
        "raw",
        "raw_headers",
        "reason",
        "type",
    )

    def __init__(self, row: tuple[Any, ...]) -> None:
        (
            self.id,
            self.queue,
            self.priority,
            enqueued_at,
            self.attempts,
            self.max_attempts,
            self.type,
            self.key,
            self.position,
            headers,
            self.raw,
            history,
            self.reason,
            died_at,
        ) = row
        self.enqueued_at = from_ms(enqueued_at)
        self.died_at = from_ms(died_at)
        self.raw_headers: str | bytes | None = headers
        try:  # a dead letter can always be listed, whatever its row holds
            self.headers: dict[str, str] = _events.codec.decode_headers(headers)
        except _errors.EventError:
            self.headers = {}
        try:
            self.history: list[Attempt] = _history.decode(history)
        except msgspec.DecodeError:
            self.history = []

    state: ClassVar[str] = "dead"

    @cached_property
    def payload(self) -> Any:
        """The payload, decoded (an Event for event jobs: UnknownEventType without its
        class; `raw_payload` reads it anyway)."""
        return decode_payload(self.type, self.raw)

    @cached_property
    def raw_payload(self) -> Any:
        """The stored JSON as Python builtins: readable without the event's class."""
        return _any_json.decode(self.raw)

    @property
    def last_error(self) -> str:
        """Why it died (its reason), as `JobInfo.last_error`."""
        reason: str = self.reason
        return reason

    def __repr__(self) -> str:
        return f"<DeadLetter {self.queue}#{self.id} {self.reason!r}>"


class JobInfo(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """A live job as an operator sees it (`Queue.jobs`, `Queue.get`, `Store.job`): a
    snapshot, with no lease of its own.

    `state`: "ready" (claimable now), "scheduled" (its run time is ahead: delayed or
    waiting out a retry's backoff), "running" (leased by a worker) or "expired" (past
    `expires` before its first claim, or out of attempts: the next sweep dead-letters
    it); in an ordered queue also "held" (behind its key's head) and "parked" (a head
    the park policy stopped; docs/adr/0021). `visible_at`: a waiting job's run time
    (a held job's own, for when its turn comes), a running job's lease end."""

    id: int
    queue: str
    state: str
    priority: int
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    visible_at: datetime
    expires_at: datetime | None
    dedupe_key: str | None
    type: str | None
    key: str | None
    position: int | None
    headers: dict[str, str]
    raw: str
    history: list[Attempt]
    progress: Any = None

    @property
    def last_error(self) -> str | None:
        """The error of the last ended attempt (None before any)."""
        return self.history[-1].error if self.history else None

    @cached_property
    def payload(self) -> Any:
        """The payload, decoded (an Event for event jobs: UnknownEventType without its
        class; `raw_payload` reads it anyway)."""
        return decode_payload(self.type, self.raw)

    @cached_property
    def raw_payload(self) -> Any:
        """The stored JSON as Python builtins: readable without the event's class."""
        return _any_json.decode(self.raw)


def job_info(row: tuple[Any, ...]) -> JobInfo:
    """A JobInfo from a row of `jobs_list` / `job_get` (whatever its stored parts hold)."""
    (
        job_id,
        queue,
        state,
        priority,
        attempts,
        max_attempts,
        enqueued_at,
        visible_at,
        expires_at,
        dedupe_key,
        type_name,
        key,
        position,
        headers,
        raw,
        progress,
        history,
    ) = row[:17]
    try:
        decoded_headers = _events.codec.decode_headers(headers)
    except _errors.EventError:
        decoded_headers = {}
    try:
        attempts_history = _history.decode(history)
    except msgspec.DecodeError:
        attempts_history = []
    return JobInfo(
        id=job_id,
        queue=queue,
        state=state,
        priority=priority,
        attempts=attempts,
        max_attempts=max_attempts,
        enqueued_at=from_ms(enqueued_at),
        visible_at=from_ms(visible_at),
        expires_at=None if expires_at is None else from_ms(expires_at),
        dedupe_key=dedupe_key,
        type=type_name,
        key=key,
        position=position,
        headers=decoded_headers,
        raw=raw if isinstance(raw, str) else bytes(raw).decode(),
        history=attempts_history,
        progress=_any_json.decode(progress) if progress else None,
    )


def dead_letter(row: tuple[Any, ...]) -> DeadLetter:
    """A DeadLetter from a row of `job_get` (the dead half of the union)."""
    job_id, queue, _, priority, attempts, max_attempts, enqueued_at = row[:7]
    type_name, key, position, headers, raw, _, history, reason, died_at = row[10:19]
    return DeadLetter(
        (
            job_id,
            queue,
            priority,
            enqueued_at,
            attempts,
            max_attempts,
            type_name,
            key,
            position,
            headers,
            raw,
            history,
            reason,
            died_at,
        )
    )


class QueueStats(msgspec.Struct, frozen=True):
    """Counts for one queue. `oldest_ready_age` is in seconds (None when nothing is ready)."""

    ready: int
    scheduled: int
    active: int
    dead: int
    oldest_ready_age: float | None


class SweepResult(msgspec.Struct, frozen=True):
    """What one `store.sweep()` did; `ran` is False when another process held the lock.
    `purged`: dead letters past their retention; `pruned_events`: events of the log
    past its retention; `workers`: rows of workers not seen for an hour."""

    ran: bool
    expired: int = 0
    lease_expired: int = 0
    purged: int = 0
    pruned_events: int = 0
    workers: int = 0
