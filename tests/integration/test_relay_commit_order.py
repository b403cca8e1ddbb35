"""The relay on PostgreSQL: commit order, not insert order, and open transactions stall nothing.

ADR 0004: an event's position is assigned after its transaction commits. The
relay reads "after the checkpoint" inside its own transaction, so an event whose
transaction appended first and committed last must still be relayed, after the
events that committed before it. A writing transaction left open shows up in
`store.status().holdups` while everything committed meanwhile keeps flowing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import alkstore
import relay
from tests.conftest import Backend
from tests.events import Written

PROMPT = 10.0  # seconds from commit to claimable; generous on a busy machine


@contextmanager
def caller_connection(backend: Backend) -> Iterator[psycopg.Connection[Any]]:
    """A connection the application owns (not autocommit); closed (rolled back) at exit."""
    conn: psycopg.Connection[Any] = psycopg.connect(backend.url)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def running_relay(store: alkstore.Store, lease_ttl: float = 1.0) -> Iterator[relay.Relay]:
    loop = relay.Relay(store, lease_ttl=lease_ttl)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loop.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-relay", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not loop.is_leader and not errors:
            assert time.monotonic() < deadline, "the relay did not take the lease"
            time.sleep(0.01)
        yield loop
    finally:
        loop.stop()
        store.engine.wake.fire()
        thread.join(timeout=30)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


def event_ids(jobs: list[alkstore.Job[Any]]) -> list[tuple[int, int]]:
    out = []
    for job in jobs:
        event = job.payload
        assert isinstance(event, Written)
        out.append((event.writer, event.seq))
    return out


def drain(store: alkstore.Store, queue: str) -> list[alkstore.Job[Any]]:
    q = store.queue(queue)
    jobs: list[alkstore.Job[Any]] = []
    while batch := q.claim_many(1_000, visibility=600):
        assert q.ack_many(batch) == []
        jobs.extend(batch)
    return sorted(jobs, key=lambda job: job.position)


def wait_for_jobs(store: alkstore.Store, queue: str, n: int) -> list[alkstore.Job[Any]]:
    q = store.queue(queue)
    jobs: list[alkstore.Job[Any]] = []
    deadline = time.monotonic() + PROMPT
    while len(jobs) < n:
        jobs.extend(q.claim_many(n - len(jobs), visibility=600))
        assert time.monotonic() < deadline, f"{len(jobs)} of {n} jobs after {PROMPT} s"
        time.sleep(0.005)
    return jobs


def ids_and_positions(backend: Backend) -> dict[tuple[int, int], tuple[int, int | None]]:
    """(writer, seq) -> (id, position) of every stored event."""
    with psycopg.connect(backend.url, autocommit=True) as conn:
        cursor = conn.execute(
            f"SELECT (payload->>'writer')::int, (payload->>'seq')::int, id, position "
            f"FROM {backend.namespace}.events"
        )
        return {(w, s): (i, p) for w, s, i, p in cursor}


def test_first_appender_committing_last_is_relayed_next(pg_backend: Backend) -> None:
    ns = pg_backend.namespace
    with pg_backend.migrated() as store, caller_connection(pg_backend) as conn_a:
        store.subscribe("all", ["*"], start="beginning")
        store.subscribe("firsts", ["test.written"], start="beginning")
        alkstore.append(conn_a, Written(writer=1, seq=0), namespace=ns)  # A: first, left open
        with store.transaction() as tx:
            tx.append(Written(writer=2, seq=0))  # B commits while A is open
        with store.transaction() as tx:
            tx.append(Written(writer=3, seq=0))  # so does C

        assert store.relay_batch() == (4, 2)
        for queue in ("all", "firsts"):
            jobs = drain(store, queue)
            assert event_ids(jobs) == [(2, 0), (3, 0)]
            assert [job.position for job in jobs] == [1, 2]
        marks = {s.queue: s.checkpoint for s in store.subscriptions()}
        assert marks == {"all": 2, "firsts": 2}
        assert store.relay_batch() == (0, 0), "A's event must not be relayed before it commits"

        conn_a.commit()  # A commits last
        assert store.relay_batch() == (2, 1)
        for queue in ("all", "firsts"):
            jobs = drain(store, queue)
            assert event_ids(jobs) == [(1, 0)], f"{queue}: A's event was skipped"
            assert jobs[0].position == 3
        assert store.relay_batch() == (0, 0)

    stored = ids_and_positions(pg_backend)
    id_a, position_a = stored[(1, 0)]
    id_b, position_b = stored[(2, 0)]
    assert id_a < id_b, "A inserted first"
    assert position_a is not None and position_b is not None and position_a > position_b, (
        "A committed last, so its position follows B's although its id precedes it"
    )


def test_first_appender_committing_last_is_relayed_by_the_relay_loop(
    pg_backend: Backend,
) -> None:
    ns = pg_backend.namespace
    with pg_backend.migrated() as store, caller_connection(pg_backend) as conn_a:
        store.subscribe("all", ["*"], start="beginning")
        with running_relay(store):
            alkstore.append(conn_a, Written(writer=1, seq=0), namespace=ns)
            for seq in range(3):
                with store.transaction() as tx:
                    tx.append(Written(writer=2, seq=seq))
            early = wait_for_jobs(store, "all", 3)
            assert event_ids(early) == [(2, 0), (2, 1), (2, 2)]

            conn_a.commit()
            committed = time.monotonic()
            (late,) = wait_for_jobs(store, "all", 1)
            latency = time.monotonic() - committed
            assert event_ids([late]) == [(1, 0)]
            assert late.position > max(job.position for job in early)
            time.sleep(0.2)
            assert store.queue("all").claim() is None, "an event was relayed twice"
    print(f"caller-owned commit to claimable: {latency:.3f} s")


def test_a_long_open_writing_transaction_is_a_holdup_and_stalls_nothing(
    pg_backend: Backend,
) -> None:
    ns = pg_backend.namespace
    with pg_backend.migrated() as store, caller_connection(pg_backend) as conn_a:
        store.subscribe("all", ["*"], start="beginning")
        assert store.status().holdups == []
        with running_relay(store):
            alkstore.append(conn_a, Written(writer=1, seq=0), namespace=ns)
            pid = conn_a.info.backend_pid
            for round_ in range(3):
                with store.transaction() as tx:
                    tx.append(Written(writer=2, seq=round_))
                (job,) = wait_for_jobs(store, "all", 1)
                assert event_ids([job]) == [(2, round_)], "the open transaction stalled the relay"
                time.sleep(0.3)

            status = store.status()
            holdups = {h.pid: h for h in status.holdups}
            assert pid in holdups, status.holdups
            holdup = holdups[pid]
            assert holdup.age >= 0.8, holdup
            assert holdup.state == "idle in transaction", holdup
            assert "INSERT INTO" in holdup.query and f"{ns}.events" in holdup.query, holdup
            (lag,) = status.subscriptions
            assert (lag.checkpoint, lag.events, lag.seconds) == (status.head, 0, None), (
                "everything committed is relayed while the transaction stays open"
            )

            conn_a.commit()
            (job,) = wait_for_jobs(store, "all", 1)
            assert event_ids([job]) == [(1, 0)]
            assert job.position == 4
        assert pid not in {h.pid for h in store.status().holdups}
