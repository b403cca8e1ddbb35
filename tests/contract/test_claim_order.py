"""Claims take exactly what the walk of the claim index took (ADR 0006 addendum 2026-12-01).

The claim range-scans each priority level up to now instead of walking every row of
the queue. On random queues (several priority levels, more than the claim probes one by
one too, ready and delayed jobs with equal run times, exhausted ones, jobs expiring
before or after their first claim, leases that lapsed after a start or a prefetch) each
`claim_many` must take the jobs the old walk takes on the same rows at the same moment
(tests/claim_walk.py, rolled back), in the same order, and write the same attempts,
start marks, run times, leases and "lease expired" history.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

import alkstore
from alkstore import _cursor, _queue
from tests import claim_walk
from tests.clock import Clock
from tests.conftest import Backend

START_MS = 1_700_000_000_000
LEASE_MS = 5_000
HOUR_MS = 3_600_000


@pytest.fixture(autouse=True)
def full_claims_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every claim here is a full claim, however slow the machine makes it: these tests
    hold the full claim to the walk. Claims from a cursor, which a run of slow full
    claims turns on (PostgreSQL), trade this order for a bounded delay; they are tested
    in tests/integration/test_claim_cursor.py (docs/adr/0027)."""
    monkeypatch.setattr(_cursor, "FAST", float("inf"))


def _insert(backend: Backend, rows: list[dict[str, Any]]) -> None:
    """Jobs written as a hand-written producer or an older alkstore could."""
    columns = list(rows[0])
    conn = backend.raw_connection()
    try:
        if backend.name == "sqlite":
            marks = ", ".join(f":{c}" for c in columns)
            table = f"{backend.namespace}__jobs"
            with conn:
                conn.executemany(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows
                )
        else:
            marks = ", ".join(f"%({c})s" for c in columns)
            table = f"{backend.namespace}.jobs"
            for row in rows:
                row["started"] = bool(row["started"])
            with conn.transaction():
                conn.cursor().executemany(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows
                )
    finally:
        conn.close()


def _random_rows(rng: random.Random, queue: str, now_ms: int, far: bool) -> list[dict[str, Any]]:
    """Jobs of `queue` at 1, 2, 5 or 40 priority levels. Run times come from a few values so that
    many are equal (the id decides); `far`: every time an hour or more from now (for the
    database's clock, which moves between statements)."""
    levels = rng.sample(range(-3, 60), rng.choice([1, 2, 5, 40]))
    unit = HOUR_MS if far else 1_000
    rows: list[dict[str, Any]] = []
    for _ in range(rng.randint(20, 150)):
        leased = rng.random() < 0.3
        attempts = rng.randint(0, 3)
        rows.append(
            {
                "queue": queue,
                "priority": rng.choice(levels),
                "visible_at": now_ms + unit * rng.choice([-3, -1, -1, 0, 1, 2]),
                "enqueued_at": now_ms - 10 * unit,
                "expires_at": None if rng.random() < 0.6 else now_ms + unit * rng.choice([-2, 1]),
                "attempts": attempts,
                "max_attempts": rng.randint(1, 3),
                "lease_token": rng.randint(1, 2**40) if leased else None,
                "lease_ms": rng.choice([1_000, 10**13]) if leased else None,
                "started": int(leased and attempts > 0 and rng.random() < 0.7),
                "payload": json.dumps({"i": len(rows)}),
                "history": "[]" if attempts == 0 else '[{"attempt": 1, "error": "x", "at": 1}]',
            }
        )
    return rows


def _claims_follow_the_walk(
    backend: Backend, q: alkstore.Queue, rng: random.Random, clock: Clock | None
) -> None:
    for _ in range(8):
        n = rng.choice([1, 2, 5, 20, 100])
        start = rng.choice([n, n, 0, rng.randint(0, n)])
        now = None if clock is None else clock.ms
        expected = claim_walk.walk(backend, q.name, n, start, LEASE_MS, now)
        jobs = q.claim_many(n, visibility=LEASE_MS / 1000, start=start)
        conn = backend.raw_connection()
        try:
            got = claim_walk.claimed_rows(backend, conn, [job.id for job in jobs])
        finally:
            conn.close()
        if clock is None:  # the lease ends at the database's now, which moved: not compared
            expected = [row[:5] + row[6:] for row in expected]
            got = [row[:5] + row[6:] for row in got]
        assert got == expected
        order = sorted(expected, key=lambda row: (-row[1], row[4], row[0]))
        assert [job.id for job in jobs] == [row[0] for row in order]
        if jobs and rng.random() < 0.5:
            q.ack_many(rng.sample(jobs, rng.randint(1, len(jobs))))
        if clock is not None:
            clock.advance(rng.choice([0, 0.5, 1, 3]))


@pytest.mark.parametrize("levels", [1, 2, 3, _queue.CLAIM_LEVELS])
def test_claims_take_what_the_walk_took(
    backend: Backend, rng: random.Random, monkeypatch: pytest.MonkeyPatch, levels: int
) -> None:
    """`levels`: the levels a claim probes one by one (CLAIM_LEVELS, or fewer so that
    the walk below them runs on small queues too)."""
    monkeypatch.setattr(_queue, "CLAIM_LEVELS", levels)
    clock = Clock(START_MS / 1000)
    with backend.migrated(clock=clock) as store:
        for round in range(4):
            _insert(backend, _random_rows(rng, f"q{round}", clock.ms, far=False))
            _claims_follow_the_walk(backend, store.queue(f"q{round}"), rng, clock)


def test_claims_on_the_database_clock_take_what_the_walk_took(
    backend: Backend, rng: random.Random
) -> None:
    """The database's time (no injected clock): on PostgreSQL a lapsed lease is up for a
    claim only once the server has been up for the lease's length (ADR 0012), and a
    lease of 10**13 ms never is."""
    with backend.migrated() as store:
        for round in range(4):
            now_ms = int(store.now() * 1000)
            _insert(backend, _random_rows(rng, f"q{round}", now_ms, far=True))
            _claims_follow_the_walk(backend, store.queue(f"q{round}"), rng, None)
