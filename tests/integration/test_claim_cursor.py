"""Claims from a cursor while an old snapshot holds back vacuum (PostgreSQL; docs/adr/0027).

While a snapshot older than the drain is open, the claim-index entries of every job
processed since are neither removable nor skippable: a full claim reads its level's
range from the start and walks them all. A claimer whose full claims turn slow takes
its next jobs from where it left off (`claim_from`), and still runs a full claim often
enough to find what landed behind it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import alkstore
import relay
from alkstore import _cursor, _sql
from tests.conftest import Backend
from tests.contract.test_claim_plan import _nodes


@contextmanager
def old_snapshot(backend: Backend) -> Iterator[None]:
    """Another session in REPEATABLE READ that has read the jobs table and stays open."""
    with psycopg.connect(backend.url) as pg:
        pg.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pg.execute(f"SELECT count(*) FROM {backend.namespace}.jobs")
        yield
        pg.rollback()


def drain(q: alkstore.Queue, n: int) -> alkstore.Job[Any]:
    q.enqueue_many(list(range(n)))
    last = None
    while jobs := q.claim_many(100):
        q.ack_many(jobs)
        last = jobs[-1]
    assert last is not None
    return last


def blocks(backend: Backend, name: str, params: dict[str, Any]) -> tuple[int, int]:
    """(blocks the scans that find the jobs read, jobs found) of one claim, rolled back."""
    sql = _sql.queries("alkstore.postgres", backend.namespace)[name]
    with psycopg.connect(backend.url) as pg, pg.transaction(force_rollback=True):
        row = pg.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    finding = [n for n in _nodes(top) if n.get("Subplan Name", "").startswith("CTE ")]
    scans = [
        n
        for cte in finding
        for n in _nodes(cte)
        if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]
    ]
    return sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for n in scans), top["Actual Rows"]


def test_the_claim_from_the_cursor_does_not_walk_what_was_processed(pg_backend: Backend) -> None:
    """Under an old snapshot the full claim's reads grow with the jobs drained since it
    began; the claim from the cursor reads about as much after 2,000 as after 32,000
    (its blocks vary with where the rows fall, not with the history)."""
    params = {"queue": "q", "now": None, "lease_ms": 30_000, "n": 100, "go": 1, "levels": 32}
    full: list[int] = []
    hinted: list[int] = []
    with pg_backend.migrated() as store, old_snapshot(pg_backend):
        q = store.queue("q")
        for n in (2_000, 10_000, 20_000):
            last = drain(q, n)
            q.enqueue_many(list(range(100)))
            cursor = json.dumps([[0, last.due_ms, last.id]])
            cost, found = blocks(pg_backend, "claim", params)
            assert found == 100
            full.append(cost)
            cost, found = blocks(pg_backend, "claim_from", {**params, "from": cursor})
            assert found == 100
            hinted.append(cost)
            q.ack_many(q.claim_many(100))
    assert full[-1] > 8 * full[0], (full, hinted)  # the walk the cursor avoids
    assert max(hinted) <= full[0] + 100, (full, hinted)


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def slow_claims(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """Every full claim counts as slow, and the cursor's clock is the test's."""
    fake = FakeTime()
    monkeypatch.setattr(_cursor, "FAST", 0.0)
    monkeypatch.setattr(_cursor, "PER_JOB", 0.0)
    monkeypatch.setattr(_cursor, "time", fake)
    return fake


def test_a_job_behind_the_cursor_waits_for_the_next_full_claim(
    pg_backend: Backend, slow_claims: FakeTime
) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        q.enqueue_many(list(range(_cursor.SLOW_RUNS)))
        for _ in range(_cursor.SLOW_RUNS):  # full claims, slow: the cursor takes over
            job = q.claim()
            assert job is not None
            job.ack()
        behind = q.enqueue("behind", run_at=time.time() - 60)
        ahead = q.enqueue("ahead")
        assert [j.id for j in q.claim_many(10)] == [ahead]  # from the cursor
        assert q.next_due() == 0.0  # an idle worker looks again soon
        slow_claims.now += 3600  # the next full claim is due
        assert [j.id for j in q.claim_many(10)] == [behind]


def test_a_higher_priority_level_waits_for_the_next_full_claim(
    pg_backend: Backend, slow_claims: FakeTime
) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        q.enqueue_many(list(range(_cursor.SLOW_RUNS + 1)))
        for _ in range(_cursor.SLOW_RUNS):
            q.ack_many(q.claim_many(1))
        urgent = q.enqueue("urgent", priority=10)
        assert [j.payload for j in q.claim_many(10)] == [_cursor.SLOW_RUNS]
        slow_claims.now += 3600
        assert [j.id for j in q.claim_many(10)] == [urgent]


def test_a_paused_queue_gives_nothing_from_the_cursor(
    pg_backend: Backend, slow_claims: FakeTime
) -> None:
    with pg_backend.migrated() as store:
        q = store.queue("q")
        q.enqueue_many(list(range(10)))
        for _ in range(_cursor.SLOW_RUNS):
            q.ack_many(q.claim_many(1))
        q.pause()
        assert q.claim_many(10) == []
        q.resume()
        assert len(q.claim_many(10)) == 10 - _cursor.SLOW_RUNS


def test_an_idle_worker_finds_a_job_behind_the_cursor_before_its_poll(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real time: the full claim falls due SHARE times a claim's time later (milliseconds
    here), and the worker's due timer looks again well before its 60 s poll."""
    monkeypatch.setattr(_cursor, "FAST", 0.0)
    monkeypatch.setattr(_cursor, "PER_JOB", 0.0)
    with pg_backend.migrated() as store:
        q = store.queue("q")
        ran: dict[str, float] = {}
        done = threading.Event()
        worker = relay.Worker(store, poll=60)

        @worker.handler("q")
        def handle(job: alkstore.Job[str]) -> None:
            ran[job.payload] = time.monotonic()
            if job.payload == "behind":
                done.set()

        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            for name in [f"job {i}" for i in range(_cursor.SLOW_RUNS + 1)]:
                q.enqueue(name)
                deadline = time.monotonic() + 10
                while name not in ran and time.monotonic() < deadline:
                    time.sleep(0.005)
            sent = time.monotonic()
            q.enqueue("behind", run_at=time.time() - 60)
            assert done.wait(10), ran
            assert ran["behind"] - sent < 5.0
        finally:
            worker.stop()
            thread.join(10)
