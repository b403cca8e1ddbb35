"""A consumer killed while it holds a lease (ADR 0006): the job comes back by itself.

A child process claims a job with a short visibility, reports the claim and sleeps;
the parent SIGKILLs it. No sweeper runs for the common case: the lease runs out and
the job is simply visible again, on its next attempt, with "lease expired" in its
history. On the last attempt the job is never handed out again, and the sweep
dead-letters it with reason "lease expired" once the lease ran out. A stale holder
of an expired lease that was claimed again is fenced by its lease token: LeaseLost,
and nothing changes.

Timing assertions are one-sided and derived from the child's own clock readings
around its claim (same machine, same clock), so a slow machine makes a probe
inconclusive, never wrong."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend

ROOT = Path(__file__).resolve().parents[2]
SLACK = 0.005  # seconds: epoch-ms truncation of the two clock readings
RETURN_DEADLINE = 10.0  # seconds we poll for the job to come back after its lease

CLAIM_AND_SLEEP = """
import json, sys, time
import alkstore
store = alkstore.connect(sys.argv[1], namespace=sys.argv[2])
queue = store.queue(sys.argv[3])
before = time.time()
job = queue.claim(visibility=float(sys.argv[4]))
after = time.time()
report = None if job is None else {
    "id": job.id, "attempt": job.attempt, "token": job.lease_token,
    "before": before, "after": after,
}
print(json.dumps(report), flush=True)
time.sleep(300)
"""


@dataclass(frozen=True)
class ChildClaim:
    """What the killed child claimed, and its clock readings around the claim."""

    id: int
    attempt: int
    token: int
    before: float  # time.time() just before the claim: the lease ends no earlier than +vis
    after: float  # time.time() just after it: the lease ends no later than +vis

    def lease_end_bounds(self, visibility: float) -> tuple[float, float]:
        return self.before + visibility - SLACK, self.after + visibility + SLACK


@contextmanager
def killed_claimer(backend: Backend, queue: str, visibility: float) -> Iterator[ChildClaim]:
    """Spawn a child that claims one job from `queue`; SIGKILL it once it has reported."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CLAIM_AND_SLEEP,
            backend.url,
            backend.namespace,
            queue,
            str(visibility),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        readable, _, _ = select.select([child.stdout], [], [], 60)
        assert readable, "the child did not report a claim within 60 s"
        line = child.stdout.readline()
        if not line:
            child.wait(timeout=30)
            pytest.fail(f"the child exited without a report: {child.stderr.read()}")
        report = json.loads(line)
        assert report is not None, "the child found no job to claim"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        yield ChildClaim(**report)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def poll_claim(queue: alkstore.Queue, visibility: float) -> tuple[alkstore.Job[object], float]:
    """Claim until a job comes back (RETURN_DEADLINE at most); the job and when it came."""
    deadline = time.monotonic() + RETURN_DEADLINE
    while True:
        job = queue.claim(visibility=visibility)
        if job is not None:
            return job, time.time()
        assert time.monotonic() < deadline, f"no job came back within {RETURN_DEADLINE} s"
        time.sleep(0.05)


def ms(seconds: float) -> int:
    return int(seconds * 1000)


START_MS = 1_700_000_000_000


@pytest.fixture
def real_store(backend: Backend) -> Iterator[alkstore.Store]:
    with backend.migrated() as store:
        yield store


@pytest.fixture
def clock() -> Clock:
    return Clock(START_MS / 1000)


@pytest.fixture
def clocked_store(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock) as store:
        yield store


# -- real processes, real time ----------------------------------------------------


@pytest.mark.slow
def test_killed_claimers_job_returns_after_its_lease(
    real_store: alkstore.Store, backend: Backend
) -> None:
    visibility = 2.0
    queue = real_store.queue("killed")
    job_id = queue.enqueue({"n": 1}, max_attempts=3)

    with killed_claimer(backend, "killed", visibility) as claim:
        assert (claim.id, claim.attempt) == (job_id, 1)
        earliest_end, latest_end = claim.lease_end_bounds(visibility)

        # Right after the kill the lease is still running: nobody gets the job.
        probe_at = time.time()
        early = queue.claim(visibility=30)
        probed = time.time()
        if early is None:
            assert probe_at < latest_end, "the lease had ended but the job was not claimable"
        else:  # the machine was too slow to probe inside the lease: it must have ended
            assert probed >= earliest_end, "a job was handed out while its lease was running"
        if probed < earliest_end:
            stats = queue.stats()
            if time.time() < earliest_end:
                assert (stats.ready, stats.active) == (0, 1), stats

    job, returned = (early, probed) if early is not None else poll_claim(queue, 30)
    assert returned >= earliest_end, "the job came back before its lease ended"
    assert job.id == job_id and job.attempt == 2 and job.max_attempts == 3
    assert job.lease_token != claim.token
    assert job.payload == {"n": 1}
    assert queue.stats() == alkstore.QueueStats(0, 0, 1, 0, None)

    job.fail("gave up after the kill")
    (dead,) = queue.dead_letters()
    assert dead.id == job_id and dead.reason == "gave up after the kill"
    assert dead.attempts == 2 and dead.payload == {"n": 1}
    lost, last = dead.history
    assert (lost.attempt, lost.error) == (1, "lease expired")
    assert ms(claim.before) + ms(visibility) <= lost.at <= ms(claim.after) + ms(visibility), (
        "the lost attempt is stamped with the time its lease ran out"
    )
    assert (last.attempt, last.error) == (2, "gave up after the kill")
    assert queue.stats() == alkstore.QueueStats(0, 0, 0, 1, None)


@pytest.mark.slow
def test_killed_claimer_on_the_last_attempt_is_dead_lettered_by_the_sweep(
    real_store: alkstore.Store, backend: Backend
) -> None:
    visibility = 1.0
    queue = real_store.queue("last_try")
    job_id = queue.enqueue("only once", max_attempts=1)

    with killed_claimer(backend, "last_try", visibility) as claim:
        assert (claim.id, claim.attempt) == (job_id, 1)
        earliest_end, latest_end = claim.lease_end_bounds(visibility)
        early = real_store.sweep()  # inside the lease (unless the machine is very slow)
        swept = time.time()
        assert early.ran
        assert early.lease_expired == 0 or swept >= earliest_end, "swept a running lease"
        if early.lease_expired == 0 and time.time() < earliest_end:
            assert queue.dead_letters() == []

    while time.time() < latest_end:
        time.sleep(0.05)
    assert queue.claim() is None, "an exhausted job was handed out again"
    claims_buried = len(queue.dead_letters())  # claims bury exhausted jobs too (ADR 0012)
    result = real_store.sweep()
    assert result.ran
    assert early.lease_expired + result.lease_expired + claims_buried == 1
    (dead,) = queue.dead_letters()
    assert dead.id == job_id and dead.reason == "lease expired"
    assert dead.attempts == 1 and dead.max_attempts == 1 and dead.payload == "only once"
    assert [(a.attempt, a.error) for a in dead.history] == [(1, "lease expired")]
    assert ms(claim.before) + ms(visibility) <= dead.history[0].at
    assert dead.history[0].at <= ms(claim.after) + ms(visibility)
    assert queue.stats() == alkstore.QueueStats(0, 0, 0, 1, None)
    assert real_store.sweep().lease_expired == 0


# -- the stale holder, in-process with an injected clock --------------------------------


def test_stale_holder_is_fenced_and_changes_nothing(
    clocked_store: alkstore.Store, clock: Clock
) -> None:
    queue = clocked_store.queue("stale")
    queue.configure(backoff=alkstore.Fixed(1.0))
    job_id = queue.enqueue("payload", max_attempts=5)
    stale = queue.claim(visibility=1)
    assert stale is not None and stale.id == job_id and stale.attempt == 1
    clock.advance(0.999)
    assert queue.claim() is None, "claimable 1 ms before its lease ends"
    clock.advance(0.001)  # visible_at <= now: exactly at the lease's end it is claimable
    fresh = queue.claim(visibility=30)
    assert fresh is not None and fresh.id == job_id and fresh.attempt == 2
    assert fresh.lease_token != stale.lease_token

    operations: list[tuple[str, Callable[[], None]]] = [
        ("ack", stale.ack),
        ("retry", stale.retry),
        ("retry", lambda: stale.retry(delay=0, error="late")),
        ("heartbeat", stale.heartbeat),
        ("heartbeat", lambda: stale.heartbeat(progress={"stale": True}, extend=600)),
        ("fail", lambda: stale.fail("late")),
    ]
    for operation, call in operations:
        with pytest.raises(alkstore.LeaseLost) as lost:
            call()
        assert lost.value.job_id == job_id and lost.value.operation == operation
        assert queue.stats() == alkstore.QueueStats(0, 0, 1, 0, None)
        assert queue.dead_letters() == []
    assert queue.ack_many([stale]) == [job_id]
    assert queue.stats() == alkstore.QueueStats(0, 0, 1, 0, None)

    # The fresh holder's lease is intact: its own heartbeat works, its lease end is
    # the one it set (the stale extend=600 did not land), and the history holds no
    # trace of the stale retry/fail.
    fresh.heartbeat(progress={"fresh": 1}, extend=10)
    clock.advance(9.999)
    assert queue.claim() is None
    clock.advance(0.001)
    third = queue.claim(visibility=30)
    assert third is not None and third.id == job_id and third.attempt == 3
    assert third.progress == {"fresh": 1}
    for gone in (stale, fresh):
        with pytest.raises(alkstore.LeaseLost):
            gone.ack()
    third.fail("done")
    (dead,) = queue.dead_letters()
    start = START_MS
    assert [(a.attempt, a.error, a.at) for a in dead.history] == [
        (1, "lease expired", start + 1_000),
        (2, "lease expired", start + 11_000),
        (3, "done", start + 11_000),
    ]
    assert dead.attempts == 3 and dead.reason == "done"


def test_an_expired_lease_nobody_reclaimed_still_belongs_to_its_holder(
    clocked_store: alkstore.Store, clock: Clock
) -> None:
    """ADR 0006 fences a stale holder only once someone else claimed the job."""
    queue = clocked_store.queue("late_but_fine")
    queue.enqueue("x")
    job = queue.claim(visibility=1)
    assert job is not None
    clock.advance(5)
    assert queue.stats().ready == 1  # visible again...
    job.heartbeat()  # ...but still ours until another claim: renewing takes it back
    assert queue.stats() == alkstore.QueueStats(0, 0, 1, 0, None)
    assert queue.claim() is None
    job.ack()
    assert queue.stats() == alkstore.QueueStats(0, 0, 0, 0, None)


def test_an_exhausted_expired_lease_is_active_until_the_sweep_buries_it(
    clocked_store: alkstore.Store, clock: Clock
) -> None:
    """ADR 0006: the claim never hands it out nor buries it; stats() counts it active."""
    queue = clocked_store.queue("limbo")
    job_id = queue.enqueue("x", max_attempts=1)
    job = queue.claim(visibility=1)
    assert job is not None
    clock.advance(2)
    assert queue.claim() is None  # never handed out again
    assert queue.dead_letters() == []
    assert queue.stats() == alkstore.QueueStats(0, 0, 1, 0, None)
    result = clocked_store.sweep()
    assert (result.ran, result.expired, result.lease_expired) == (True, 0, 1)
    (dead,) = queue.dead_letters()
    assert (dead.id, dead.reason, dead.attempts) == (job_id, "lease expired", 1)
    assert dead.died_at == datetime.fromtimestamp(clock(), UTC)
    assert [(a.attempt, a.error, a.at) for a in dead.history] == [
        (1, "lease expired", START_MS + 1_000)
    ]
    assert queue.stats() == alkstore.QueueStats(0, 0, 0, 1, None)
    with pytest.raises(alkstore.LeaseLost):
        job.ack()
