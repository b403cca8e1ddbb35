"""The claim from a cursor, on both engines (docs/adr/0027).

PostgreSQL's queues run it while their full claims are slow (an old snapshot keeps the
index entries of every processed job); SQLite's never need it, but both engines define
the same statements, and this holds both to what it takes: per level the cursor names,
highest first, the ready jobs after the cursor's entry, in claim order; nothing behind
it, nothing delayed, nothing from a level it does not name, nothing while paused.
"""

from __future__ import annotations

import json
from typing import Any

import alkstore
from tests.clock import Clock

START = 1_700_000_000.0


def claim_from(q: alkstore.Queue, clock: Clock, cursor: list[list[int]]) -> list[Any]:
    params = {
        "queue": q.name,
        "now": clock.ms,
        "lease_ms": 30_000,
        "n": 10,
        "go": 1,
        "from": json.dumps(cursor),
    }
    rows = q._engine.run("claim_from", params)  # the statement itself
    return sorted((-row[2], row[3], row[0]) for row in rows)


def test_the_claim_from_a_cursor_takes_what_follows_it(backend: Any) -> None:
    clock = Clock(START)
    with backend.migrated(clock=clock) as store:
        q = store.queue("q")
        high = [q.enqueue(i, priority=5) for i in range(3)]
        clock.advance(1)
        low = [q.enqueue(i) for i in range(3)]
        other = q.enqueue("other level", priority=1)
        later = q.enqueue("delayed", delay=60)
        assert other and later
        clock.advance(1)
        start_ms = int(START * 1000)
        cursor = [[5, start_ms, high[0]], [0, start_ms + 1000, low[1]]]
        taken = claim_from(q, clock, cursor)
        assert [job_id for _, _, job_id in taken] == [high[1], high[2], low[2]]
        assert claim_from(q, clock, cursor) == []  # leased now: nothing more


def test_a_paused_queue_gives_nothing_from_a_cursor(backend: Any) -> None:
    clock = Clock(START)
    with backend.migrated(clock=clock) as store:
        q = store.queue("q")
        ids = [q.enqueue(i) for i in range(3)]
        clock.advance(1)
        cursor = [[0, int(START * 1000), ids[0]]]
        q.pause()
        assert claim_from(q, clock, cursor) == []
        q.resume()
        assert [job_id for _, _, job_id in claim_from(q, clock, cursor)] == ids[1:]


def test_the_top_claim_takes_the_top_levels_ready_jobs_alone(backend: Any) -> None:
    """`claim_top` (alkstore/_cursor.py `Claims`): the ready jobs of the queue's highest
    priority, in claim order; none of a lower level, none delayed, none while paused."""
    clock = Clock(START)
    with backend.migrated(clock=clock) as store:
        q = store.queue("q")
        high = [q.enqueue(i, priority=5) for i in range(3)]
        q.enqueue("delayed", priority=5, delay=60)
        q.enqueue("lower", priority=1)
        clock.advance(1)
        params = {"queue": "q", "now": clock.ms, "lease_ms": 30_000, "n": 10, "go": 1}
        q.pause()
        assert q._engine.run("claim_top", params) == []
        q.resume()
        rows = q._engine.run("claim_top", params)
        assert sorted(row[0] for row in rows) == high
        assert q._engine.run("claim_top", params) == []  # leased: nothing more
