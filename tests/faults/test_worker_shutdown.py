"""Stopping the CLI worker (ADR 0008): SIGTERM drains in-flight jobs, a second one exits now.

The worker runs as a user runs it, `python -m relay.cli worker
tests.faults.slow_jobs:worker --db URL`, its output in a log file (never a pipe: a
full pipe would block it). The handler in tests/faults/slow_jobs.py sleeps and
appends `"<pid> <job id> <attempt>"` to a "started" file when it begins a job and to
a "finished" file when it returns; the queue tells what was acked (acked jobs are
deleted). A second worker with `--once` drains what the first left, and the check
is: every job finished and acked exactly once overall, except that a job released
at the end of the grace period may also have finished in the first process (its
result is ignored), and a released job's attempt does not count (it runs again as
attempt 1).
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import alkstore
from tests.conftest import Backend
from tests.processes import CliProcess

TARGET = "tests.faults.slow_jobs:worker"
QUEUE = "slow"  # slow_jobs.QUEUE (importing that module would connect to a database)
JOBS = 40
CONCURRENCY = 4
STARTUP = 60.0  # seconds a worker process may take to start its first jobs (busy machine)
DRAIN = 60.0  # seconds a `--once` drain may take
PROMPT = 10.0  # seconds: "exits promptly" (expected well under 1 s after the last job)


@dataclass(frozen=True)
class Record:
    """One line of the started/finished files."""

    pid: int
    job: int
    attempt: int


def read_records(path: Path) -> list[Record]:
    if not path.exists():
        return []
    return [Record(*map(int, line.split())) for line in path.read_text().splitlines() if line]


class WorkerProcess(CliProcess):
    """One `alkstore worker` subprocess with its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__("worker", args, log_path, env)

    def signal(self, signum: int) -> None:
        assert self.alive(), self.describe()
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> tuple[int, float]:
        """(exit code, seconds it took) once the process exits; fails after `timeout`."""
        start = time.monotonic()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the worker did not exit within {timeout} s\n{self.describe()}"
            ) from None
        return code, time.monotonic() - start

    def counters(self) -> dict[str, int]:
        """The counters of the "worker stopped: {...}" log line."""
        match = re.search(r"worker stopped: (\{.*\})", self.output())
        assert match, f"no 'worker stopped' line\n{self.describe()}"
        counters: dict[str, int] = ast.literal_eval(match.group(1))
        return counters


class Workers:
    """Starts worker processes for one test; all killed and reaped when it ends."""

    def __init__(self, backend: Backend, tmp: Path) -> None:
        self.backend = backend
        self.started = tmp / "started"
        self.finished = tmp / "finished"
        self.tmp = tmp
        self.all: list[WorkerProcess] = []

    def start(
        self,
        *,
        sleep: float,
        grace: float = 30.0,
        visibility: float = 30.0,
        once: bool = False,
    ) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if k != "ALKSTORE_DB"}
        env.update(
            ALKSTORE_TEST_NS=self.backend.namespace,
            SLOW_JOBS_STARTED=str(self.started),
            SLOW_JOBS_FINISHED=str(self.finished),
            SLOW_JOBS_SLEEP=str(sleep),
            SLOW_JOBS_GRACE=str(grace),
            SLOW_JOBS_VISIBILITY=str(visibility),
            SLOW_JOBS_CONCURRENCY=str(CONCURRENCY),
        )
        args = [TARGET, "--db", self.backend.url]
        if once:
            args.append("--once")
        log_path = self.tmp / f"worker-{len(self.all)}.log"
        worker = WorkerProcess(args, env, log_path)
        self.all.append(worker)
        return worker

    def records(self) -> tuple[list[Record], list[Record]]:
        return read_records(self.started), read_records(self.finished)

    def wait_for(self, condition: Callable[[], bool], what: str, worker: WorkerProcess) -> None:
        deadline = time.monotonic() + STARTUP
        while not condition():
            assert worker.alive(), f"the worker died waiting for {what}\n{worker.describe()}"
            assert time.monotonic() < deadline, f"no {what} after {STARTUP} s\n{worker.describe()}"
            time.sleep(0.02)

    def drain(self) -> WorkerProcess:
        """A second worker with `--once` (fast jobs) runs what is left, then exits 0."""
        worker = self.start(sleep=0.05, once=True)
        code, _ = worker.wait(DRAIN)
        assert code == 0, worker.describe()
        return worker

    def close(self) -> None:
        errors = []
        for worker in self.all:
            try:
                worker.close()
            except Exception as exc:  # reap the others anyway
                errors.append(exc)
        if errors:
            raise errors[0]


@contextmanager
def workers(backend: Backend, tmp: Path) -> Iterator[Workers]:
    started = Workers(backend, tmp)
    try:
        yield started
    finally:
        started.close()


def enqueue_jobs(store: alkstore.Store) -> list[int]:
    ids = store.queue(QUEUE).enqueue_many([{"n": n} for n in range(JOBS)])
    assert all(i is not None for i in ids)
    return [i for i in ids if i is not None]


def counts(q: alkstore.Queue) -> tuple[int, int, int, int]:
    """(ready, scheduled, active, dead)."""
    stats = q.stats()
    return (stats.ready, stats.scheduled, stats.active, stats.dead)


def by_pid(records: list[Record], pid: int) -> list[Record]:
    return [r for r in records if r.pid == pid]


def test_sigterm_lets_in_flight_jobs_finish_then_a_drain_acks_the_rest(
    store: alkstore.Store, backend: Backend, tmp_path: Path
) -> None:
    ids = enqueue_jobs(store)
    q = store.queue(QUEUE)
    with workers(backend, tmp_path) as w:
        first = w.start(sleep=0.5)
        w.wait_for(lambda: len(w.records()[1]) >= 6, "6 finished jobs", first)
        # mid-batch: signal while jobs are in flight (they all sleep 0.5 s)
        w.wait_for(lambda: len(w.records()[0]) > len(w.records()[1]), "jobs in flight", first)
        started_at_signal, finished_at_signal = w.records()
        first.signal(signal.SIGTERM)
        code, took = first.wait(PROMPT)
        assert code == 0, first.describe()

        started, finished = w.records()
        in_flight = {r.job for r in started_at_signal} - {r.job for r in finished_at_signal}
        assert in_flight, "nothing was in flight at the signal"
        first_started = {r.job for r in by_pid(started, first.pid)}
        first_finished = [r.job for r in by_pid(finished, first.pid)]
        assert in_flight <= set(first_finished), "in-flight jobs must finish within the grace"
        assert set(first_finished) == first_started, "nothing left running or released"
        assert len(first_finished) < JOBS, "the worker stopped claiming at the signal"
        counters = first.counters()
        assert counters.get("released", 0) == 0
        assert counters["ack"] == len(first_finished)
        # prefetched jobs that never started went back at once (no attempt counted)
        assert counters["claimed"] == counters["ack"] + counters.get("returned", 0)
        assert counts(q) == (JOBS - len(first_finished), 0, 0, 0)

        second = w.drain()
        started, finished = w.records()

    finished_count = Counter(r.job for r in finished)
    assert sorted(finished_count) == sorted(ids), "every job finished"
    assert [job for job, n in finished_count.items() if n > 1] == [], "a job ran twice"
    assert Counter(r.job for r in started) == finished_count, "every started job finished"
    assert {r.job for r in by_pid(finished, second.pid)} == set(ids) - set(first_finished)
    assert {r.attempt for r in finished} == {1}
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 0, None), "everything acked"
    print(f"SIGTERM -> exit 0 in {took:.2f} s; {len(in_flight)} in flight finished")


def test_jobs_running_past_the_grace_are_released_without_counting_an_attempt(
    store: alkstore.Store, backend: Backend, tmp_path: Path
) -> None:
    ids = enqueue_jobs(store)
    q = store.queue(QUEUE)
    with workers(backend, tmp_path) as w:
        first = w.start(sleep=3.0, grace=0.5)
        w.wait_for(lambda: len(w.records()[0]) >= CONCURRENCY, "a full batch in flight", first)
        first.signal(signal.SIGTERM)
        code, _ = first.wait(PROMPT + 3.0)  # see test_exit_after_the_grace_is_prompt
        assert code == 0, first.describe()

        counters = first.counters()
        released = {r.job for r in by_pid(w.records()[0], first.pid)}
        assert len(released) == CONCURRENCY
        assert counters.get("released", 0) == CONCURRENCY and counters.get("ack", 0) == 0
        # released: visible again at once, nothing acked, nothing dead
        assert counts(q) == (JOBS, 0, 0, 0)

        second = w.drain()
        finished = w.records()[1]

    second_finished = by_pid(finished, second.pid)
    assert sorted(r.job for r in second_finished) == sorted(ids), "each job once in the drain"
    assert {r.attempt for r in second_finished} == {1}, "a released job kept its attempt"
    twice = {job for job, n in Counter(r.job for r in finished).items() if n > 1}
    assert twice <= released, "only released jobs may have finished in both processes"
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)


def test_exit_after_the_grace_is_prompt(
    store: alkstore.Store, backend: Backend, tmp_path: Path
) -> None:
    enqueue_jobs(store)
    with workers(backend, tmp_path) as w:
        first = w.start(sleep=8.0, grace=0.5)
        w.wait_for(lambda: len(w.records()[0]) >= CONCURRENCY, "a full batch in flight", first)
        first.signal(signal.SIGTERM)
        code, took = first.wait(PROMPT + 8.0)
        assert code == 0, first.describe()
        assert first.counters().get("released", 0) == CONCURRENCY
        assert took < 4.0, f"exited {took:.1f} s after SIGTERM with grace=0.5"


def test_a_second_signal_exits_at_once(
    store: alkstore.Store, backend: Backend, tmp_path: Path
) -> None:
    ids = enqueue_jobs(store)
    q = store.queue(QUEUE)
    visibility = 2.0
    with workers(backend, tmp_path) as w:
        first = w.start(sleep=30.0, visibility=visibility)
        w.wait_for(lambda: len(w.records()[0]) >= CONCURRENCY, "a full batch in flight", first)
        first.signal(signal.SIGTERM)
        time.sleep(0.3)
        first.signal(signal.SIGTERM)
        code, took = first.wait(PROMPT)
        assert code == 128 + signal.SIGTERM, first.describe()
        assert took < 5.0, f"the second signal took {took:.1f} s to exit"
        interrupted = {r.job for r in by_pid(w.records()[0], first.pid)}
        assert len(interrupted) == CONCURRENCY and w.records()[1] == []
        assert "worker stopped" not in first.output()

        # Not released: the leases run out (attempt counted), then a drain runs everything.
        deadline = time.monotonic() + visibility + 30
        while q.stats().active:
            assert time.monotonic() < deadline, f"leases never expired: {q.stats()}"
            time.sleep(0.1)
        second = w.drain()
        finished = w.records()[1]

    assert sorted(r.job for r in finished) == sorted(ids)
    assert {r.pid for r in finished} == {second.pid}
    assert {r.job: r.attempt for r in finished} == {
        job: 2 if job in interrupted else 1 for job in ids
    }, "the interrupted attempt counts"
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)
