"""The queue against an in-memory model (ADR 0006), driven by a hypothesis state machine.

Every example gets a fresh namespace (PostgreSQL: a schema, dropped at teardown;
SQLite: a database file of its own, deleted at teardown) and an injected clock kept
in whole milliseconds. Rules enqueue (priority, delay, max_attempts, expiry, a
per-job backoff), claim (one or several, with a visibility), ack / ack_many, retry
(explicit delay, or the Fixed backoff of the job or the queue), fail, release,
heartbeat (extend, progress), advance the clock, sweep and requeue, with dedupe
keys (unique among live jobs; raise or ignore). Stale handles are never
discarded, so every operation is also tried on leases that were lost.

Checked after every step: `stats()` equals the model's ready / scheduled / active /
dead counts and oldest ready age; the dead letters (ids, reasons, attempts, history,
times) equal the model's; and, white-box, every live row's visible_at, attempts and
lease token equal the model's (read through a raw connection). Checked by the
rules: each claim hands out exactly the jobs the model predicts (priority desc,
then visible time, then id), in that order, with their attempt number, payload and
progress; every operation on a handle raises LeaseLost exactly when the model says
its lease was lost, and then changes nothing.

A lease that runs out on the last attempt stays a live job, counted as active and
never handed out, until the sweep buries it with "lease expired" (the claim stays
a pure claim).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import alkstore
from tests.conftest import Backend
from tests.machines import StoreMachine

QUEUE = "modelled"
QUEUE_MAX_ATTEMPTS = 3
QUEUE_BACKOFF_MS = 1_500  # the queue's Fixed curve
QUEUE_VISIBILITY_MS = 2_000
JOB_BACKOFF_MS = 500  # the Fixed curve some jobs carry themselves
# Measured on 2 cores: 100 x 50 runs in about 3 s (SQLite) and 15-20 s (PostgreSQL).
# 25 x 30 caught seeded model mutations (the job's own backoff ignored, the default
# heartbeat extend wrong) in about half the runs; 100 x 50 in five runs out of six.
EXAMPLES = int(os.environ.get("ALKSTORE_MODEL_EXAMPLES", "100"))
STEPS = int(os.environ.get("ALKSTORE_MODEL_STEPS", "50"))

Entry = tuple[int, str, int]  # (attempt, error, at ms): one history entry

# Durations are whole quarter seconds: exact as float seconds, so ms = seconds * 1000.
# The clock itself is kept in whole ms: int((ms / 1000) * 1000) == ms near START_MS.
quarters = st.integers(0, 12).map(lambda q: q * 250)


def seconds(ms: int) -> float:
    return ms / 1000


def instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@dataclass
class ModelJob:
    id: int
    payload: int
    priority: int
    enqueued_at: int
    visible_at: int
    max_attempts: int
    expires_at: int | None
    backoff_ms: int | None
    attempts: int = 0
    token: int | None = None
    lease_ms: int | None = None
    progress: Any = None
    dedupe_key: str | None = None
    history: list[Entry] = field(default_factory=list)


@dataclass
class ModelDead:
    job: ModelJob  # as it died: attempts and history include the last entry
    reason: str
    died_at: int

    def row(self) -> tuple[Any, ...]:
        j = self.job
        return (
            j.id,
            self.reason,
            j.attempts,
            j.max_attempts,
            j.priority,
            j.history,
            j.payload,
            instant(j.enqueued_at),
            instant(self.died_at),
        )


def dead_row(d: alkstore.DeadLetter) -> tuple[Any, ...]:
    history = [(a.attempt, a.error, a.at) for a in d.history]
    return (
        d.id,
        d.reason,
        d.attempts,
        d.max_attempts,
        d.priority,
        history,
        d.payload,
        d.enqueued_at,
        d.died_at,
    )


class QueueModel:
    """One queue in memory, written from ADR 0006 (times in epoch ms)."""

    def __init__(self) -> None:
        self.jobs: dict[int, ModelJob] = {}
        self.dead: dict[int, ModelDead] = {}

    def holds(self, job_id: int, token: int) -> bool:
        """Does a handle with this token still own the job? (Only the token decides.)"""
        job = self.jobs.get(job_id)
        return job is not None and job.token == token

    @staticmethod
    def ready(job: ModelJob, now: int) -> bool:
        unexpired = job.expires_at is None or job.attempts > 0 or job.expires_at > now
        return job.visible_at <= now and job.attempts < job.max_attempts and unexpired

    def stats(self, now: int) -> alkstore.QueueStats:
        ready = [j for j in self.jobs.values() if self.ready(j, now)]
        scheduled = [j for j in self.jobs.values() if j.visible_at > now and j.token is None]
        # held, or exhausted with its last lease run out: active until the sweep buries it
        active = [
            j
            for j in self.jobs.values()
            if j.token is not None and (j.visible_at > now or j.attempts >= j.max_attempts)
        ]
        oldest = min((j.visible_at for j in ready), default=None)
        return alkstore.QueueStats(
            len(ready),
            len(scheduled),
            len(active),
            len(self.dead),
            None if oldest is None else max(0.0, (now - oldest) / 1000),
        )

    def next_claims(self, now: int, n: int) -> list[ModelJob]:
        ready = [j for j in self.jobs.values() if self.ready(j, now)]
        ready.sort(key=lambda j: (-j.priority, j.visible_at, j.id))
        return ready[:n]

    def claimed(self, job: ModelJob, now: int, lease_ms: int, token: int) -> None:
        if job.token is not None:  # the previous lease ran out: its attempt was lost
            job.history.append((job.attempts, "lease expired", job.visible_at))
        job.attempts += 1
        job.visible_at = now + lease_ms
        job.lease_ms = lease_ms
        job.token = token

    def bury(self, job_id: int, reason: str, entry: Entry | None, now: int) -> None:
        job = self.jobs.pop(job_id)
        if entry is not None:
            job.history.append(entry)
        self.dead[job_id] = ModelDead(job, reason, now)

    def sweep(self, now: int) -> alkstore.SweepResult:
        expired = [
            j.id
            for j in self.jobs.values()
            if j.expires_at is not None and j.expires_at <= now and j.attempts == 0
        ]
        for job_id in expired:
            self.bury(job_id, "expired", None, now)
        exhausted = self.exhausted(now)
        for job in exhausted:
            self.bury(job.id, "lease expired", (job.attempts, "lease expired", job.visible_at), now)
        return alkstore.SweepResult(True, len(expired), len(exhausted), 0)

    def exhausted(self, now: int) -> list[ModelJob]:
        """Jobs whose last attempt's lease ran out: never claimable, waiting for the sweep."""
        return [
            j
            for j in self.jobs.values()
            if j.token is not None and j.visible_at <= now and j.attempts >= j.max_attempts
        ]

    def next_change(self, now: int) -> int | None:
        """The next time after `now` a job becomes visible or its first-claim deadline passes."""
        times = [j.visible_at for j in self.jobs.values() if j.visible_at > now]
        times += [
            j.expires_at
            for j in self.jobs.values()
            if j.expires_at is not None and j.attempts == 0 and j.expires_at > now
        ]
        return min(times, default=None)

    def live_keys(self) -> set[str]:
        return {j.dedupe_key for j in self.jobs.values() if j.dedupe_key is not None}

    def requeue(self, ids: list[int] | None, reset: bool, now: int) -> int:
        """Dead letters back, visible now; one whose dedupe key a live job holds stays dead,
        and of chosen dead letters sharing a key only the oldest comes back."""
        chosen = sorted(self.dead) if ids is None else sorted(i for i in ids if i in self.dead)
        held = self.live_keys()
        picked = []
        for i in chosen:
            key = self.dead[i].job.dedupe_key
            if key is None or key not in held:
                picked.append(i)
                if key is not None:
                    held.add(key)
        chosen = picked
        for job_id in chosen:
            job = self.dead.pop(job_id).job
            job.attempts = 0 if reset else min(job.attempts, job.max_attempts - 1)
            job.visible_at = now
            job.token = None
            job.lease_ms = None
            job.progress = None
            job.expires_at = None  # the expiry is for the first claim only; not kept
            self.jobs[job_id] = job
        return len(chosen)


def machine_for(backend: Backend, directory: Path) -> type[RuleBasedStateMachine]:
    """A state machine class bound to one engine; each instance is one fresh namespace."""

    class QueueMachine(StoreMachine):
        peek: Any = None  # a raw connection that reads the jobs table

        def __init__(self) -> None:
            super().__init__(backend, directory, "m")
            self.model = QueueModel()
            self.handles: list[alkstore.Job[Any]] = []  # every claim ever made, stale or not
            self.payloads = 0

        def set_up(self, store: alkstore.Store) -> None:
            if backend.name == "sqlite":
                self.peek = apsw.Connection(str(self.backend.files[0]))
                self.jobs_table = f"{self.backend.namespace}__jobs"
            else:
                self.peek = psycopg.connect(backend.url, autocommit=True)
                self.jobs_table = f"{self.backend.namespace}.jobs"
            self.queue = store.queue(QUEUE)
            self.queue.configure(
                max_attempts=QUEUE_MAX_ATTEMPTS,
                backoff=alkstore.Fixed(seconds(QUEUE_BACKOFF_MS)),
                visibility=seconds(QUEUE_VISIBILITY_MS),
            )

        def close(self) -> None:
            if self.peek is not None:
                self.peek.close()

        # -- helpers -----------------------------------------------------------------

        def pick(self, index: int) -> alkstore.Job[Any]:
            """A handle: even indexes prefer a live lease (if any), odd ones take any."""
            live = [h for h in self.handles if self.model.holds(h.id, h.lease_token)]
            pool = live if live and index % 2 == 0 else self.handles
            return pool[(index // 2) % len(pool)]

        def attempt(
            self, handle: alkstore.Job[Any], operation: str, call: Callable[[], None]
        ) -> bool:
            """Run an operation on a handle; LeaseLost exactly when the model says so."""
            held = self.model.holds(handle.id, handle.lease_token)
            if held:
                call()
            else:
                with pytest.raises(alkstore.LeaseLost) as lost:
                    call()
                assert (lost.value.job_id, lost.value.operation) == (handle.id, operation)
            return held

        # -- rules ---------------------------------------------------------------------

        @initialize(count=st.integers(1, 4), own_backoff=st.booleans())
        def fill(self, count: int, own_backoff: bool) -> None:
            """Start with a few jobs visible now so that the first claims have work."""
            self.enqueue("enqueue_many", count, 0, None, None, None, own_backoff, None, "raise")

        @rule(
            how=st.sampled_from(["enqueue", "enqueue_many", "transaction"]),
            count=st.integers(1, 3),
            priority=st.integers(-1, 2),
            delay=st.none() | quarters,
            max_attempts=st.sampled_from([None, 1, 2, 3]),
            expires=st.none() | st.sampled_from([0, 500, 3_000]),
            own_backoff=st.booleans(),
            dedupe_key=st.sampled_from([None, None, "a", "b"]),
            on_duplicate=st.sampled_from(["raise", "ignore"]),
        )
        def enqueue(
            self,
            how: str,
            count: int,
            priority: int,
            delay: int | None,
            max_attempts: int | None,
            expires: int | None,
            own_backoff: bool,
            dedupe_key: str | None,
            on_duplicate: str,
        ) -> None:
            payloads = list(
                range(self.payloads, self.payloads + (1 if how == "enqueue" else count))
            )
            self.payloads += len(payloads)
            options: dict[str, Any] = {
                "priority": priority,
                "delay": None if delay is None else seconds(delay),
                "max_attempts": max_attempts,
                "expires": None if expires is None else instant(self.now + expires),
                "backoff": alkstore.Fixed(seconds(JOB_BACKOFF_MS)) if own_backoff else None,
                "dedupe_key": dedupe_key,
                "on_duplicate": on_duplicate,
            }
            # The key is unique among live jobs: all jobs of one call share it, so only the
            # first can take it, and only if no live job holds it.
            free = dedupe_key is None or dedupe_key not in self.model.live_keys()
            fresh = [dedupe_key is None or (free and k == 0) for k in range(len(payloads))]
            if on_duplicate == "raise" and not all(fresh):
                with pytest.raises(alkstore.DuplicateJob) as duplicate:
                    self.enqueue_now(how, payloads, options)
                assert (duplicate.value.queue, duplicate.value.key) == (QUEUE, dedupe_key)
                return  # a call that raised wrote nothing (one transaction)
            ids = self.enqueue_now(how, payloads, options)
            assert [i is not None for i in ids] == fresh
            for job_id, payload in zip(ids, payloads, strict=True):
                if job_id is None:
                    continue
                assert job_id not in self.model.jobs
                assert job_id not in self.model.dead
                self.model.jobs[job_id] = ModelJob(
                    id=job_id,
                    payload=payload,
                    priority=priority,
                    enqueued_at=self.now,
                    visible_at=self.now + (delay or 0),
                    max_attempts=QUEUE_MAX_ATTEMPTS if max_attempts is None else max_attempts,
                    expires_at=None if expires is None else self.now + expires,
                    backoff_ms=JOB_BACKOFF_MS if own_backoff else None,
                    dedupe_key=dedupe_key,
                )

        def enqueue_now(
            self, how: str, payloads: list[int], options: dict[str, Any]
        ) -> list[int | None]:
            ids: list[int | None]
            if how == "enqueue":
                ids = [self.queue.enqueue(payloads[0], **options)]
            elif how == "enqueue_many":
                ids = self.queue.enqueue_many(payloads, **options)
            else:
                assert self.store is not None
                with self.store.transaction() as tx:
                    ids = [tx.enqueue(QUEUE, p, **options) for p in payloads]
            assert len(ids) == len(payloads)
            return ids

        @rule(
            n=st.integers(1, 3),
            single=st.booleans(),
            visibility=st.none() | st.sampled_from([500, 1_000, 2_500, 5_000]),
        )
        def claim(self, n: int, single: bool, visibility: int | None) -> None:
            vis = None if visibility is None else seconds(visibility)
            if single:
                n = 1
                one = self.queue.claim(visibility=vis)
                jobs = [] if one is None else [one]
            else:
                jobs = self.queue.claim_many(n, visibility=vis)
            expected = self.model.next_claims(self.now, n)
            assert [j.id for j in jobs] == [m.id for m in expected], "claimed the wrong jobs"
            lease_ms = QUEUE_VISIBILITY_MS if visibility is None else visibility
            for job, m in zip(jobs, expected, strict=True):
                assert (job.attempt, job.max_attempts) == (m.attempts + 1, m.max_attempts)
                assert (job.priority, job.payload, job.progress) == (
                    m.priority,
                    m.payload,
                    m.progress,
                )
                assert job.enqueued_at == instant(m.enqueued_at)
                assert job.lease_ms == lease_ms
                assert isinstance(job.lease_token, int)
                self.model.claimed(m, self.now, lease_ms, job.lease_token)
                self.handles.append(job)

        @precondition(lambda self: bool(self.handles))
        @rule(index=st.integers(0, 1_000))
        def ack(self, index: int) -> None:
            handle = self.pick(index)
            if self.attempt(handle, "ack", handle.ack):
                del self.model.jobs[handle.id]

        @precondition(lambda self: bool(self.handles))
        @rule(indexes=st.lists(st.integers(0, 1_000), min_size=1, max_size=4))
        def ack_many(self, indexes: list[int]) -> None:
            chosen: dict[int, alkstore.Job[Any]] = {}
            for index in indexes:  # one handle per job id: lost ids are reported by id
                handle = self.pick(index)
                chosen.setdefault(handle.id, handle)
            handles = list(chosen.values())
            expected_lost = [h.id for h in handles if not self.model.holds(h.id, h.lease_token)]
            assert self.queue.ack_many(handles) == expected_lost
            for h in handles:
                if h.id not in expected_lost:
                    del self.model.jobs[h.id]

        @precondition(lambda self: bool(self.handles))
        @rule(
            index=st.integers(0, 1_000),
            delay=st.none() | quarters,
            error=st.none() | st.just("boom"),
        )
        def retry(self, index: int, delay: int | None, error: str | None) -> None:
            handle = self.pick(index)
            last = handle.attempt >= handle.max_attempts
            operation = "fail" if last else "retry"
            vis = None if delay is None else seconds(delay)
            if not self.attempt(handle, operation, lambda: handle.retry(delay=vis, error=error)):
                return
            message = "retry requested" if error is None else error
            entry = (handle.attempt, message, self.now)
            if last:
                self.model.bury(handle.id, message, entry, self.now)
                return
            job = self.model.jobs[handle.id]
            if delay is None:
                delay = QUEUE_BACKOFF_MS if job.backoff_ms is None else job.backoff_ms
            job.history.append(entry)
            job.visible_at = self.now + delay
            job.token = None

        @precondition(lambda self: bool(self.handles))
        @rule(index=st.integers(0, 1_000), reason=st.sampled_from(["bad", "worse"]))
        def fail(self, index: int, reason: str) -> None:
            handle = self.pick(index)
            if self.attempt(handle, "fail", lambda: handle.fail(reason)):
                entry = (handle.attempt, reason, self.now)
                self.model.bury(handle.id, reason, entry, self.now)

        @precondition(lambda self: bool(self.handles))
        @rule(index=st.integers(0, 1_000))
        def release(self, index: int) -> None:
            """ADR 0008: back to the queue at once, and the attempt does not count."""
            handle = self.pick(index)
            if self.attempt(handle, "release", handle.release):
                job = self.model.jobs[handle.id]
                job.attempts -= 1
                job.visible_at = self.now
                job.token = None

        @precondition(lambda self: bool(self.handles))
        @rule(
            index=st.integers(0, 1_000),
            extend=st.none() | st.sampled_from([500, 1_000, 5_000]),
            progress=st.sampled_from([None, 1, "half", {"step": 2}]),
        )
        def heartbeat(self, index: int, extend: int | None, progress: Any) -> None:
            handle = self.pick(index)
            ext = None if extend is None else seconds(extend)
            call = lambda: handle.heartbeat(progress=progress, extend=ext)  # noqa: E731
            if self.attempt(handle, "heartbeat", call):
                job = self.model.jobs[handle.id]
                job.visible_at = self.now + (handle.lease_ms if extend is None else extend)
                if progress is not None:
                    job.progress = progress

        @rule(ms=st.integers(0, 40).map(lambda q: q * 250), then_sweep=st.booleans())
        def advance(self, ms: int, then_sweep: bool) -> None:
            self.now += ms
            if then_sweep:  # one rule, not two, so that sweeps do not crowd out claims
                assert self.store is not None
                assert self.store.sweep() == self.model.sweep(self.now)

        @precondition(lambda self: self.model.next_change(self.now) is not None)
        @rule(just_before=st.booleans())
        def advance_to_next_change(self, just_before: bool) -> None:
            """Land on the next instant a job changes state (or 1 ms before): an off-by-one
            or a wrong lease or backoff length shows up in stats() right there."""
            change = self.model.next_change(self.now)
            assert change is not None
            self.now = max(self.now, change - 1) if just_before else change

        @precondition(
            lambda self: any(
                j.token is not None and j.visible_at > self.now for j in self.model.jobs.values()
            )
        )
        @rule(then_sweep=st.booleans())
        def outlive_leases(self, then_sweep: bool) -> None:
            """Jump to the end of the longest running lease: every held lease runs out."""
            ends = [j.visible_at for j in self.model.jobs.values() if j.token is not None]
            self.advance(max(ends) - self.now, then_sweep)

        @precondition(lambda self: bool(self.model.dead))
        @rule(which=st.none() | st.lists(st.integers(0, 1_000), max_size=3), reset=st.booleans())
        def requeue(self, which: list[int] | None, reset: bool) -> None:
            dead = sorted(self.model.dead)
            ids = None if which is None else sorted({dead[i % len(dead)] for i in which})
            count = self.queue.requeue(ids, reset_attempts=reset)
            assert count == self.model.requeue(ids, reset, self.now)

        # -- invariants ----------------------------------------------------------------

        @invariant()
        def stats_match(self) -> None:
            assert self.queue.stats() == self.model.stats(self.now)

        @invariant()
        def live_jobs_match(self) -> None:
            """White-box: each live row's schedule and lease equal the model's, so a wrong
            backoff, lease or heartbeat length fails at once, not only when the clock
            happens to land between the right and the wrong time."""
            query = (
                "SELECT id, priority, visible_at, attempts, max_attempts, lease_token "
                f"FROM {self.jobs_table} WHERE queue = '{QUEUE}' ORDER BY id"
            )
            rows = [tuple(row) for row in self.peek.execute(query).fetchall()]
            expected = [
                (j.id, j.priority, j.visible_at, j.attempts, j.max_attempts, j.token)
                for j in sorted(self.model.jobs.values(), key=lambda j: j.id)
            ]
            assert rows == expected

        @invariant()
        def dead_letters_match(self) -> None:
            actual = [dead_row(d) for d in self.queue.dead_letters(limit=1_000)]
            expected = [self.model.dead[i].row() for i in sorted(self.model.dead)]
            assert actual == expected

    return QueueMachine


@pytest.mark.timeout(600)
def test_queue_matches_the_model(backend: Backend, tmp_path: Path) -> None:
    machine = machine_for(backend, tmp_path)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )


def test_requeue_of_dead_letters_sharing_a_dedupe_key(backend: Backend) -> None:
    store = backend.connect()
    try:
        store.migrate()
        queue = store.queue("dedupe_dead")
        for n in range(2):
            queue.enqueue(n, dedupe_key="k")
            job = queue.claim()
            assert job is not None
            job.fail("boom")
        assert len(queue.dead_letters()) == 2
        # Expected by the contract: one comes back, the other stays dead (key held).
        assert queue.requeue() == 1
        assert queue.stats().ready == 1 and len(queue.dead_letters()) == 1
    finally:
        store.close()
