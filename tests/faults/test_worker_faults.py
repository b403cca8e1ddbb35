"""Worker processes under faults (issue 12, ADR 0012), run as a user runs them.

- A worker whose host clock is a minute behind never runs a job at the same time
  as another worker: leases are measured on the database's clock.
- kill -9 of a worker holding prefetched jobs burns no attempt of a job that never
  started: three kills while one job ran leave only that job dead-lettered.

The workers are `python -m relay.cli worker tests.faults.slow_jobs:worker`; the
skewed one gets tests/faults/skewed_clock on its PYTHONPATH (its `time.time` and
`datetime.now` are off, its monotonic clock and the database's are not).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

import alkstore
from tests.conftest import Backend
from tests.faults.test_worker_shutdown import (
    QUEUE,
    TARGET,
    WorkerProcess,
    read_records,
)

pytestmark = pytest.mark.slow
SKEWED = Path(__file__).parent / "skewed_clock"
DEADLINE = 90.0


@contextmanager
def workers(
    backend: Backend, tmp_path: Path, *envs: dict[str, str], once: bool = False, name: str = "w"
) -> Iterator[list[WorkerProcess]]:
    """Worker subprocesses, one per env (added to the slow_jobs settings), closed at exit."""
    with ExitStack() as stack:
        procs = []
        for i, extra in enumerate(envs):
            env = {
                "ALKSTORE_TEST_NS": backend.namespace,
                "SLOW_JOBS_STARTED": str(tmp_path / "started"),
                "SLOW_JOBS_FINISHED": str(tmp_path / "finished"),
                **extra,
            }
            args = [TARGET, "--db", backend.url, "--namespace", backend.namespace]
            proc = WorkerProcess(
                args + (["--once"] if once else []), env, tmp_path / f"{name}{i}.log"
            )
            stack.callback(proc.close)
            procs.append(proc)
        yield procs


def wait_for(condition: Callable[[], bool], what: str, procs: list[WorkerProcess]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(p.describe() for p in procs)
            raise AssertionError(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.05)


def test_a_worker_whose_clock_is_behind_never_runs_a_job_beside_another(
    backend: Backend, tmp_path: Path
) -> None:
    wave, jobs = 12, 24
    with backend.migrated() as store, ExitStack() as stack:
        q = store.queue(QUEUE)
        # due long ago by every clock involved, so both workers can claim them
        q.enqueue_many([{"n": i} for i in range(wave)], run_at=time.time() - 600)
        settings = {
            "SLOW_JOBS_SLEEP": "1.5",
            "SLOW_JOBS_VISIBILITY": "4",
            "SLOW_JOBS_CONCURRENCY": "2",
        }
        behind = {
            **settings,
            "PYTHONPATH": str(SKEWED),
            "ALKSTORE_TEST_CLOCK_SKEW": "-60",  # a minute behind, for good
        }
        with workers(backend, tmp_path, behind, name="behind") as procs:
            wait_for(lambda: bool(read_records(tmp_path / "started")), "the first job", procs)
            second = stack.enter_context(workers(backend, tmp_path, settings, name="on_time"))
            procs += second
            q.enqueue_many([{"n": i} for i in range(wave)], run_at=time.time() - 600)

            def all_done() -> bool:
                finished = {r.job for r in read_records(tmp_path / "finished")}
                return len(finished) >= jobs and not q.stats().active

            wait_for(all_done, "every job", procs)
            for proc in procs:
                assert proc.terminate() == 0, proc.describe()
        starts = Counter(r.job for r in read_records(tmp_path / "started"))
        twice = {job: n for job, n in starts.items() if n > 1}
        assert not twice, f"jobs started more than once: {twice}"
        assert len(starts) == jobs
        assert q.dead_letters() == [] and q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)
        pids = {r.pid for r in read_records(tmp_path / "started")}
        assert len(pids) == 2, "both workers ran jobs"


def test_kill_9_with_prefetched_jobs_burns_no_attempt_of_a_job_that_never_started(
    backend: Backend, tmp_path: Path
) -> None:
    jobs, kills = 8, 3
    with backend.migrated() as store:
        q = store.queue(QUEUE)
        q.configure(max_attempts=kills)
        ids = q.enqueue_many([{"n": i} for i in range(jobs)])
        slow = {  # one job at a time, seven prefetched beside it; it never finishes
            "SLOW_JOBS_SLEEP": "120",
            "SLOW_JOBS_VISIBILITY": "2",
            "SLOW_JOBS_CONCURRENCY": "1",
        }
        for round_ in range(1, kills + 1):
            with workers(backend, tmp_path, slow) as procs:

                def started(n: int = round_) -> bool:
                    return len(read_records(tmp_path / "started")) >= n

                wait_for(started, f"a job to start (kill {round_})", procs)
                procs[0].kill()
            time.sleep(2.5)  # every lease it held runs out
        fast = {"SLOW_JOBS_SLEEP": "0", "SLOW_JOBS_CONCURRENCY": "1"}
        with workers(backend, tmp_path, fast, once=True) as procs:
            code, _ = procs[0].wait(DEADLINE)
            assert code == 0, procs[0].describe()
        starts = Counter(r.job for r in read_records(tmp_path / "started"))
        dead = q.dead_letters()
        for letter in dead:
            assert starts[letter.id] == kills, (
                f"job {letter.id} dead-lettered after {starts[letter.id]} starts: {letter.reason}"
            )
        assert len(dead) <= 1, "only a job that ran in each killed worker may die"
        finished = {r.job for r in read_records(tmp_path / "finished")}
        assert finished | {d.id for d in dead} == set(ids)
        assert q.stats().active == q.stats().ready == 0
