"""Live workers (docs/adr/0018): a running worker has a row in the workers table, it
refreshes it while it runs, a clean stop removes it, and a killed worker's row is
marked dead, then forgotten by the sweep."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import alkstore
import relay
from alkstore import _workers
from tests.clock import Clock
from tests.conftest import Backend
from tests.processes import CliProcess
from tests.worker_support import running

DEADLINE = 30.0


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.02)
    return found


def idle_worker(store: alkstore.Store, *queues: str) -> relay.Worker:
    worker = relay.Worker(store, concurrency=3, poll=0.2)
    for queue in queues:
        worker.handler(queue, concurrency=2)(lambda job: None)
    return worker


def test_a_running_worker_has_a_row_until_it_stops(store: alkstore.Store) -> None:
    assert store.workers() == []
    worker = idle_worker(store, "emails", "audit")
    with running(worker):
        (row,) = wait_for(store.workers, "the worker's row")
        assert (row.host, row.pid) == (socket.gethostname(), os.getpid())
        assert sorted(row.queues) == ["audit", "emails"]
        assert row.concurrency == 3
        assert row.alive and row.seen_ago < 5
        assert row.started_at == row.last_seen
    assert store.workers() == [], "a clean stop removes the row"


def test_a_stop_while_the_worker_starts_is_not_lost(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() as soon as the worker's row shows (what an operator's script, or the test
    above, does) ends the run: the start of the run must not forget it."""
    ran: list[int] = []
    worker = relay.Worker(store, concurrency=3, poll=0.2)
    worker.handler("emails")(lambda job: ran.append(job.payload["n"]))
    announce = store.worker_presence

    def presence(*args: Any) -> alkstore.Presence:
        made = announce(*args)
        worker.stop()  # the row is visible now: a stop may come at any moment
        return made

    monkeypatch.setattr(store, "worker_presence", presence)
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the stop that came while the worker started was lost"
    assert store.workers() == []
    monkeypatch.setattr(store, "worker_presence", announce)
    store.queue("emails").enqueue({"n": 1})
    worker.run(once=True)  # the stop ended that run only
    assert ran == [1]


def test_run_once_leaves_no_row(store: alkstore.Store) -> None:
    store.queue("q").enqueue({"n": 1})
    seen: list[list[alkstore.WorkerInfo]] = []
    worker = relay.Worker(store, poll=0.2)
    worker.handler("q")(lambda job: seen.append(store.workers()))
    worker.run(once=True)
    assert [len(rows) for rows in seen] == [1], "the row exists while jobs run"
    assert store.workers() == []


def test_the_row_is_refreshed_while_the_worker_runs(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workers, "HEARTBEAT", 0.05)
    clock = Clock()
    with backend.migrated(clock=clock) as store, running(idle_worker(store, "q")):
        (row,) = wait_for(store.workers, "the worker's row")
        started = row.started_at
        clock.advance(20)
        wait_for(
            lambda: store.workers()[0].last_seen.timestamp() == clock.now,
            "last_seen to follow the store's clock",
        )
        (row,) = store.workers()
        assert row.started_at == started and row.alive

        # As if the worker had been cut off: every row counts as not seen for FORGET_AFTER.
        # (Advancing the clock past FORGET_AFTER raced with the next refresh, which then
        # stored the advanced time before the sweep read it.)
        forget = _workers.FORGET_AFTER
        monkeypatch.setattr(_workers, "FORGET_AFTER", -60.0)
        assert store.sweep().workers == 1
        monkeypatch.setattr(_workers, "FORGET_AFTER", forget)
        (back,) = wait_for(store.workers, "the row to come back with the next refresh")
        assert back.id == row.id and back.started_at == started, "same run, same start"


def test_a_killed_worker_is_dead_then_forgotten_by_the_sweep(
    backend: Backend, tmp_path: Path
) -> None:
    with backend.migrated() as store:
        args = ["tests.acceptance.edge_worker:worker", "--db", backend.url]
        env = {"ALKSTORE_NAMESPACE": backend.namespace, "EDGE_DONE": str(tmp_path / "done")}
        process = CliProcess("worker", args, tmp_path / "worker.log", env)

        def rows_of_process() -> list[alkstore.WorkerInfo]:
            assert process.alive(), process.describe()
            return [w for w in store.workers() if w.pid == process.pid]

        try:
            (row,) = wait_for(rows_of_process, "the worker process's row")
            assert row.alive and row.queues == ["edge"]
            process.kill()  # SIGKILL: no clean-up at all
        finally:
            process.close()
        assert [w.pid for w in store.workers()] == [process.pid], "nobody removed the row"
        later = time.time()
        with backend.migrated(clock=lambda: later + _workers.DEAD_AFTER + 1) as after:
            (dead,) = after.workers()
            assert not dead.alive and dead.seen_ago > _workers.DEAD_AFTER
            assert after.sweep().workers == 0, "dead, but not forgotten yet"
        with backend.migrated(clock=lambda: later + _workers.FORGET_AFTER + 1) as much_later:
            assert much_later.sweep().workers == 1
        assert store.workers() == []


def test_a_presence_writes_its_counts_at_each_refresh(backend: Backend) -> None:
    """What a worker has done rides on its row's refresh (docs/adr/0023, addendum): the
    counts given are written with last_seen; a row written without counts has None."""
    clock = Clock()
    done = {"n": 0}
    with backend.migrated(clock=clock) as store:
        counted = store.worker_presence(["mail"], 2, lambda: {"mail": {"done": done["n"]}})
        plain = store.worker_presence(["audit"], 1)
        rows = {w.id: w for w in store.workers()}
        assert rows[counted.id].counts == {"mail": {"done": 0}}
        assert rows[plain.id].counts is None
        done["n"] = 41
        clock.advance(10)
        renewal = store.renewal()
        try:
            renewal.beat(counted)
        finally:
            renewal.close()
        row = next(w for w in store.workers() if w.id == counted.id)
        assert row.counts == {"mail": {"done": 41}} and row.last_seen.timestamp() == clock.now
        counted.leave()
        plain.leave()


def test_the_row_counts_what_the_worker_did_per_queue(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workers, "HEARTBEAT", 0.05)
    worker = relay.Worker(store, concurrency=4, poll=0.2)
    worker.handler("ok", concurrency=2)(lambda job: None)

    @worker.handler("bad", concurrency=2)
    def bad(job: alkstore.Job[Any]) -> None:
        if job.payload["how"] == "fail":
            raise relay.Fail("no")
        raise relay.Retry(0, "again")

    store.queue("ok").enqueue_many([{"n": n} for n in range(5)])
    bad_q = store.queue("bad")
    bad_q.enqueue_many([{"how": "retry"}, {"how": "retry"}], max_attempts=2)
    bad_q.enqueue({"how": "fail"}, max_attempts=2)
    expected = {
        "bad": {"done": 0, "retried": 2, "dead": 3},  # two retried once, then dead; one failed
        "ok": {"done": 5, "retried": 0, "dead": 0},
    }
    with running(worker):
        wait_for(
            lambda: [w.counts for w in store.workers()] == [expected],
            f"the row's counts to be {expected}",
        )
    assert bad_q.stats().dead == 3
    store.queue("ok").enqueue({"n": 5})
    with running(worker):  # another run, another row: counts from its own start
        again = {
            "bad": {"done": 0, "retried": 0, "dead": 0},
            "ok": {"done": 1, "retried": 0, "dead": 0},
        }
        wait_for(lambda: [w.counts for w in store.workers()] == [again], "the second run's counts")
