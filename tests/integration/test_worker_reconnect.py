"""The worker survives PostgreSQL connection loss (ADR 0008, "Connection loss").

A worker drains a backlog while an admin connection terminates every backend of
the worker's store twice mid-run: pooled connections (idle or mid-statement), the
LISTEN connection and the notifier's. The worker's store connects with its own
`application_name`, so only its backends are hit. A failed claim backs off and
retries, the pool discards broken connections, a failed ack leaves the job to
come back when its lease expires. The check: every job was handled at least once
(re-deliveries allowed) and the queue ends with no live job and no dead letter,
which only acks can do: nothing is lost.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest

import alkstore
import relay
from tests.conftest import Backend

JOBS = 2_000
KILL_AT = (400, 1_200)  # handled-job counts at which the worker's backends are terminated
VISIBILITY = 3.0  # seconds: bounds how long a job whose ack was lost stays leased
DEADLINE = 90.0  # seconds for the whole drain (busy machine)
JOIN = 60.0


def terminate(admin: psycopg.Connection[Any], application_name: str) -> list[int]:
    """Terminate every backend of this database opened by the worker's store."""
    rows = admin.execute(
        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND application_name = %s",
        (application_name,),
    ).fetchall()
    return [pid for pid, ok in rows if ok]


def test_worker_recovers_from_terminated_connections(
    pg_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="alkstore")
    app = f"alk_worker_{pg_backend.namespace}"
    worker_url = f"{pg_backend.url}?application_name={app}"
    setup = pg_backend.connect()
    worker_store = alkstore.connect(worker_url, namespace=pg_backend.namespace)
    admin = psycopg.connect(pg_backend.url, autocommit=True)

    lock = threading.Lock()
    handled: Counter[int] = Counter()
    acked: Counter[int] = Counter()
    ack_lost: Counter[int] = Counter()  # acks that found no job: see the end
    outcomes: Counter[str] = Counter()
    kill_now = [threading.Event() for _ in KILL_AT]

    def on_outcome(job: alkstore.Job[Any], outcome: str, seconds: float) -> None:
        with lock:
            outcomes[outcome] += 1
            if outcome == "ack":
                acked[job.id] += 1
            elif outcome == "lease_lost":
                ack_lost[job.id] += 1

    worker = relay.Worker(
        worker_store, visibility=VISIBILITY, poll=0.2, grace=10, on_outcome=on_outcome
    )

    @worker.handler("drain", concurrency=8)
    def drain(job: alkstore.Job[dict[str, int]]) -> None:
        time.sleep(0.004)
        with lock:
            handled[job.id] += 1
            done = len(handled)
        for at, event in zip(KILL_AT, kill_now, strict=True):
            if done >= at:
                event.set()

    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failures.append(exc)

    killed: list[list[int]] = []

    def killer() -> None:
        for event in kill_now:
            if not event.wait(DEADLINE):
                return
            killed.append(terminate(admin, app))

    try:
        setup.migrate()
        q = setup.queue("drain")
        ids: set[int] = set()
        for start in range(0, JOBS, 500):
            batch = q.enqueue_many([{"n": n} for n in range(start, start + 500)])
            ids |= {i for i in batch if i is not None}
        assert len(ids) == JOBS

        worker_thread = threading.Thread(target=run, name="worker", daemon=True)
        killer_thread = threading.Thread(target=killer, name="killer", daemon=True)
        killer_thread.start()
        worker_thread.start()
        try:
            deadline = time.monotonic() + DEADLINE
            while True:
                with lock:
                    all_handled = set(handled) >= ids
                if all_handled and len(killed) == len(KILL_AT):
                    stats = q.stats()
                    if (stats.ready, stats.scheduled, stats.active, stats.dead) == (0, 0, 0, 0):
                        break
                assert worker_thread.is_alive(), f"the worker died: {failures}"
                assert time.monotonic() < deadline, (
                    f"not drained after {DEADLINE} s: handled {len(handled)}/{JOBS}, "
                    f"acked {len(acked)}, kills {killed}, stats {q.stats()}, "
                    f"counters {dict(worker.counters)}"
                )
                time.sleep(0.1)
        finally:
            worker.stop()
            for event in kill_now:
                event.set()
            worker_thread.join(JOIN)
            killer_thread.join(JOIN)
        assert not worker_thread.is_alive(), "the worker did not stop"
        assert not failures, failures
        final = q.stats()
    finally:
        admin.close()
        worker_store.close()
        setup.close()

    assert len(killed) == len(KILL_AT) and all(killed), f"no worker backend terminated: {killed}"
    assert set(handled) == ids, f"{len(ids - set(handled))} jobs never handled"
    # Only an ack deletes a live job without a dead letter: all gone, none dead = all acked.
    # (on_outcome's "ack" set may miss a job whose ack committed just as its connection
    # died: the worker tries that ack again, finds the job gone and reports the job
    # "lease_lost"; only jobs of an ack batch that failed can be reported so.)
    assert final == alkstore.QueueStats(0, 0, 0, 0, None), final
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    failed_acks = sum(
        int(m.group(1)) for w in warnings if (m := re.match(r"ack of (\d+) jobs failed", w))
    )
    assert set(acked) <= ids and set(acked) | set(ack_lost) == ids
    assert len(set(ack_lost) - set(acked)) <= failed_acks, (len(ack_lost), failed_acks)
    redelivered = sum(n - 1 for n in handled.values())
    print(
        f"terminated {[len(k) for k in killed]} backends; {redelivered} re-deliveries; "
        f"outcomes {dict(outcomes)}; counters {dict(worker.counters)}; "
        f"{len(warnings)} warnings, first: {warnings[:3]}"
    )
