"""Exactly-once claim under contention (ADR 0006): many consumers, one queue, no job twice.

Every job is enqueued first; then several consumers (spawned processes, or threads)
race `claim_many` + `ack_many` until the queue is drained. Each consumer records
every job it claimed and every job it acked as (id, lease token, claim time,
payload). With a 60 s visibility no lease can run out during the run, so a job
handed to two consumers would be a broken exclusive claim (PostgreSQL: `FOR
UPDATE SKIP LOCKED`; SQLite: the single writer), and a job no consumer saw
would be a lost one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as ProcessEvent
from multiprocessing.synchronize import Semaphore as ProcessSemaphore
from pathlib import Path

import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend

JOBS = 20_000  # process test; enqueued in batches of ENQUEUE_BATCH
ENQUEUE_BATCH = 1_000
PROCESSES = 8
THREAD_JOBS = 2_000
THREADS = 8
CLAIM_N = 50
VISIBILITY = 60.0  # seconds: longer than any run, so no lease may legitimately expire
DRAIN_DEADLINE = 150.0  # seconds one consumer may take to drain before it gives up
START_DEADLINE = 60.0  # seconds the spawned processes may take to import and connect
QUEUE = "contended"

Record = tuple[int, int, float, int]  # (job id, lease token, claim time, payload)


@dataclass
class Consumed:
    """What one consumer did."""

    claimed: list[Record] = field(default_factory=list)
    acked: list[Record] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    empty_polls: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "claimed": self.claimed,
                "acked": self.acked,
                "lost": self.lost,
                "empty_polls": self.empty_polls,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Consumed:
        raw = json.loads(text)
        return cls(
            claimed=[(int(a), int(b), float(c), int(d)) for a, b, c, d in raw["claimed"]],
            acked=[(int(a), int(b), float(c), int(d)) for a, b, c, d in raw["acked"]],
            lost=[int(i) for i in raw["lost"]],
            empty_polls=int(raw["empty_polls"]),
        )


def drain(queue: alkstore.Queue) -> Consumed:
    """Claim and ack batches until a claim finds nothing and nothing is ready."""
    seen = Consumed()
    deadline = time.monotonic() + DRAIN_DEADLINE
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumer still draining after {DRAIN_DEADLINE} s")
        at = time.time()
        jobs = queue.claim_many(CLAIM_N, visibility=VISIBILITY)
        if not jobs:
            seen.empty_polls += 1
            if queue.stats().ready == 0:
                return seen
            continue
        records = {job.id: (job.id, job.lease_token, at, job.payload) for job in jobs}
        seen.claimed.extend(records.values())
        lost = set(queue.ack_many(jobs))
        seen.lost.extend(sorted(lost))
        seen.acked.extend(r for job_id, r in records.items() if job_id not in lost)


def fill(queue: alkstore.Queue, count: int) -> dict[int, int]:
    """Enqueue `count` jobs (payload = 0..count-1); return {job id: payload}."""
    expected: dict[int, int] = {}
    for start in range(0, count, ENQUEUE_BATCH):
        payloads = list(range(start, min(count, start + ENQUEUE_BATCH)))
        ids = queue.enqueue_many(payloads)
        assert all(i is not None for i in ids)
        expected.update({i: p for i, p in zip(ids, payloads, strict=True) if i is not None})
    assert len(expected) == count
    return expected


def check(
    queue: alkstore.Queue, expected: dict[int, int], consumers: list[Consumed], min_working: int
) -> None:
    """Each job claimed once and acked once, by exactly one consumer, with its payload.

    `min_working`: how many consumers must have got some work for the run to count as
    contended. SQLite's busy handler is not fair (waiters sleep and retry; the holder
    may win the lock again at once), so threads of one busy process can legitimately
    be starved by one of them; processes are checked, threads are not.
    """
    claimed = [r for c in consumers for r in c.claimed]
    acked = [r for c in consumers for r in c.acked]
    lost = [i for c in consumers for i in c.lost]
    assert not lost, f"ack_many reported {len(lost)} lost leases: {sorted(lost)[:20]}"

    twice = sorted(i for i, n in Counter(r[0] for r in claimed).items() if n > 1)
    assert not twice, f"{len(twice)} jobs claimed more than once: {twice[:20]}"
    owners: dict[int, list[int]] = {}
    for index, consumer in enumerate(consumers):
        for r in consumer.claimed:
            owners.setdefault(r[0], []).append(index)
    shared = {i: o for i, o in owners.items() if len(o) > 1}
    assert not shared, f"jobs claimed by two consumers: {list(shared.items())[:20]}"

    acked_twice = sorted(i for i, n in Counter(r[0] for r in acked).items() if n > 1)
    assert not acked_twice, f"jobs acked more than once: {acked_twice[:20]}"
    missing = sorted(set(expected) - {r[0] for r in acked})
    assert not missing, f"{len(missing)} jobs never acked: {missing[:20]}"
    unknown = sorted({r[0] for r in claimed} - set(expected))
    assert not unknown, f"claimed jobs that were never enqueued: {unknown[:20]}"
    assert len(claimed) == len(acked) == len(expected)

    wrong = [(i, p) for i, _, _, p in acked if expected[i] != p]
    assert not wrong, f"payloads do not match their job ids: {wrong[:20]}"
    assert all(isinstance(token, int) and token > 0 for _, token, _, _ in claimed)
    for consumer in consumers:  # each consumer's claims are recorded in its own time order
        times = [at for _, _, at, _ in consumer.claimed]
        assert times == sorted(times)

    working = sum(1 for c in consumers if c.acked)
    assert working >= min_working, f"only {working} consumer(s) got any work: no contention"
    assert queue.stats() == alkstore.QueueStats(0, 0, 0, 0, None)
    assert queue.dead_letters() == []
    assert queue.claim() is None


# -- processes ------------------------------------------------------------------------


def _consume_in_process(
    url: str,
    namespace: str,
    result_path: str,
    ready: ProcessSemaphore,
    go: ProcessEvent,
) -> None:
    """A consumer process (spawned): its own store; writes what it did as JSON."""
    import alkstore

    store = alkstore.connect(url, namespace=namespace)
    try:
        queue = store.queue(QUEUE)
        queue.stats()  # connected and migrated before we say ready
        ready.release()
        if not go.wait(timeout=START_DEADLINE * 2):
            raise TimeoutError("the parent never said go")
        seen = drain(queue)
    finally:
        store.close()
    tmp = f"{result_path}.tmp"
    with open(tmp, "w") as f:
        f.write(seen.to_json())
    os.replace(tmp, result_path)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_processes_claim_each_job_exactly_once(
    store: alkstore.Store, backend: Backend, tmp_path: Path
) -> None:
    queue = store.queue(QUEUE)
    started = time.monotonic()
    expected = fill(queue, JOBS)
    filled = time.monotonic()
    assert queue.stats().ready == JOBS

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    results = [tmp_path / f"consumer-{p}.json" for p in range(PROCESSES)]
    procs: list[BaseProcess] = [
        ctx.Process(
            target=_consume_in_process,
            args=(backend.url, backend.namespace, str(results[p]), ready, go),
            name=f"claimer-{p}",
        )
        for p in range(PROCESSES)
    ]
    try:
        for p in procs:
            p.start()
        up = 0
        deadline = time.monotonic() + START_DEADLINE
        while up < PROCESSES:
            if ready.acquire(timeout=0.5):
                up += 1
                continue
            dead = [p.name for p in procs if p.exitcode is not None]
            assert not dead, f"consumer processes exited before starting: {dead}"
            assert time.monotonic() < deadline, "consumer processes did not start"
        go_at = time.monotonic()
        go.set()
        for p in procs:
            p.join(timeout=DRAIN_DEADLINE + 60)
        drained = time.monotonic()
        assert [p.exitcode for p in procs] == [0] * PROCESSES
    finally:
        go.set()
        for p in procs:
            if p.is_alive():
                p.kill()
            if p.pid is not None:
                p.join()
            p.close()

    consumers = [Consumed.from_json(path.read_text()) for path in results]
    print(
        f"{backend.name}: enqueue {JOBS} in {filled - started:.1f} s, "
        f"{PROCESSES} processes drained in {drained - go_at:.1f} s; acked per process: "
        f"{[len(c.acked) for c in consumers]}, empty polls: "
        f"{[c.empty_polls for c in consumers]}"
    )
    check(queue, expected, consumers, min_working=2)


# -- threads --------------------------------------------------------------------------


@pytest.mark.parametrize("stores", ["shared", "one-each"])
def test_threads_claim_each_job_exactly_once(
    store: alkstore.Store, backend: Backend, stores: str
) -> None:
    queue = store.queue(QUEUE)
    expected = fill(queue, THREAD_JOBS)
    own = [backend.connect() for _ in range(THREADS)] if stores == "one-each" else []
    start = threading.Barrier(THREADS)

    def consumer(index: int) -> Consumed:
        mine = own[index].queue(QUEUE) if own else queue
        start.wait(timeout=60)
        return drain(mine)

    try:
        with ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="claimer") as pool:
            futures = [pool.submit(consumer, i) for i in range(THREADS)]
            consumers = [f.result(timeout=DRAIN_DEADLINE + 60) for f in futures]
    finally:
        for s in own:
            s.close()
    print(f"{backend.name}/{stores}: acked per thread: {[len(c.acked) for c in consumers]}")
    check(queue, expected, consumers, min_working=1)


# -- a lease shorter than the clock's resolution ----------------------------------------

# Decided (ADR 0006 addendum 2026-12-01): a lease is whole milliseconds and at least one;
# a visibility or extend below 0.001 s is refused with InvalidArgument before anything is
# written (not rounded: 0.0007 s is not 1 ms, 0.0004 s is not 0 ms). A 0 ms lease would
# leave the job claimable, and a second claim at the same instant would get it too.
SUB_MS = [0.0004, 0.0005, 0.0007, 0.000999]
SUB_MS_REFUSED = r"at least 0\.001 seconds"


@pytest.mark.parametrize("lease", SUB_MS)
def test_a_sub_millisecond_visibility_is_refused(backend: Backend, lease: float) -> None:
    store = backend.connect(clock=lambda: 1_700_000_000.0)
    try:
        store.migrate()
        queue = store.queue("tiny_lease")
        queue.enqueue("x")
        with pytest.raises(alkstore.InvalidArgument, match=SUB_MS_REFUSED):
            queue.claim(visibility=lease)
        with pytest.raises(alkstore.InvalidArgument, match=SUB_MS_REFUSED):
            queue.configure(visibility=lease)
        assert queue.config(refresh=True).visibility == 30.0
        job = queue.claim(visibility=0.001)  # the shortest lease: 1 ms, and exclusive
        assert job is not None and job.lease_ms == 1
        assert queue.claim(visibility=30) is None, "the same job was claimed twice at once"
    finally:
        store.close()


@pytest.mark.parametrize("lease", SUB_MS)
def test_a_sub_millisecond_heartbeat_is_refused(backend: Backend, lease: float) -> None:
    clock = Clock(1_700_000_000.0)
    store = backend.connect(clock=clock)
    try:
        store.migrate()
        queue = store.queue("tiny_lease")
        queue.enqueue("x")
        job = queue.claim(visibility=30)
        assert job is not None
        with pytest.raises(alkstore.InvalidArgument, match=SUB_MS_REFUSED):
            job.heartbeat(extend=lease)
        clock.advance(29.999)
        assert queue.claim(visibility=30) is None, "the refused heartbeat changed the lease"
        job.ack()
    finally:
        store.close()
