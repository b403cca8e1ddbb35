"""Flow control across processes (docs/adr/0021): worker processes consume one ordered
queue fed by the relay while it runs, with injected handler failures; what the
handlers observed must keep each key's order.

Scale: ALKSTORE_FLOW_PROCESSES x ALKSTORE_FLOW_KEYS keys x ALKSTORE_FLOW_JOBS jobs per
key, by default the issue's full run: 4 x 100 x 50 (about 5 s on SQLite, 9 s on
PostgreSQL, on 2 shared cores).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

import alkstore
import relay
from tests import flow_worker
from tests.conftest import Backend
from tests.events import Written

PROCESSES = int(os.environ.get("ALKSTORE_FLOW_PROCESSES", "4"))
KEYS = int(os.environ.get("ALKSTORE_FLOW_KEYS", "100"))
JOBS = int(os.environ.get("ALKSTORE_FLOW_JOBS", "50"))
FAIL_RATE = 0.1


def runs(paths: list[Path]) -> list[tuple[str, int, int, bool, float, float, int]]:
    found = []
    for path in paths:
        for line in path.read_text().splitlines():
            key, seq, attempt, ok, start, end, running = line.split()
            found.append(
                (key, int(seq), int(attempt), ok == "1", float(start), float(end), int(running))
            )
    return found


def check_order(found: list[tuple[str, int, int, bool, float, float, int]]) -> None:
    """Per key: runs never overlap, and in start order they go through the sequence
    numbers in order, each number's runs ending with its one success."""
    by_key: dict[str, list[tuple[str, int, int, bool, float, float, int]]] = defaultdict(list)
    for run in found:
        by_key[run[0]].append(run)
    assert len(by_key) == KEYS
    for key, key_runs in by_key.items():
        key_runs.sort(key=lambda r: r[4])
        for before, after in itertools.pairwise(key_runs):
            assert before[5] <= after[4], f"{key}: two runs overlapped: {before} {after}"
        expected = 0
        for _, seq, _, ok, _, _, _ in key_runs:
            assert seq == expected, f"{key}: ran {seq} while {expected} was its head"
            if ok:
                expected += 1
        assert expected == JOBS, f"{key}: {expected} of {JOBS} succeeded"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_processes_keep_each_keys_order(backend: Backend, tmp_path: Path) -> None:
    with backend.migrated() as store:
        store.subscribe(
            flow_worker.QUEUE,
            ["test.written"],
            start="beginning",
            ordered=True,
            max_attempts=50,
            backoff=alkstore.Fixed(0),
        )
        with store.transaction() as tx:  # a first part before the workers start
            for key in range(KEYS):
                tx.append(Written(writer=key, seq=0), key=f"k{key}")
        relayer = relay.Relay(store)
        while relayer.step():
            pass
        ctx = multiprocessing.get_context("spawn")
        fed = tmp_path / "fed"
        paths = [tmp_path / f"runs-{n}.txt" for n in range(PROCESSES)]
        procs = [
            ctx.Process(
                target=flow_worker.main,
                args=(backend.url, backend.namespace, str(path), 8, FAIL_RATE, False, str(fed)),
            )
            for path in paths
        ]
        for proc in procs:
            proc.start()

        def feed() -> None:  # the rest while the workers run, relayed as it commits
            for seq in range(1, JOBS):
                with store.transaction() as tx:
                    for key in range(KEYS):
                        tx.append(Written(writer=key, seq=seq), key=f"k{key}")
                relay_some()

        def relay_some() -> bool:
            """Relay what is there, as `alkstore relay` does: a batch that fails on a
            transient error (on PostgreSQL a deadlock between the batch's key locks and an
            ack's, docs/adr/0021) is rolled back and runs again."""
            try:
                while relayer.step():
                    pass
            except alkstore.DatabaseBusy:
                return False
            return True

        feeder = threading.Thread(target=feed)
        feeder.start()
        feeder.join(240)
        deadline = time.monotonic() + 60
        while relayer.created_jobs < KEYS * JOBS:  # events committed late are numbered late
            assert time.monotonic() < deadline, "the relay did not catch up"
            if not relay_some():
                time.sleep(0.05)
        relayer.lease.release()
        fed.touch()
        for proc in procs:
            proc.join(240)
            assert proc.exitcode == 0
        found = runs(paths)
        check_order(found)
        assert any(not run[3] for run in found)  # failures were injected
        assert store.queue(flow_worker.QUEUE).dead_letters() == []


def peak(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most


LIMIT, KEY_LIMIT = 6, 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_processes_never_exceed_the_limits(backend: Backend, tmp_path: Path) -> None:
    """4 processes of 8 handlers each on a queue limited to 6 jobs at once, 2 per key:
    the handlers' own samples of the leases and their run times never show more."""
    keys, per_key = KEYS // 4, JOBS // 5
    with backend.migrated() as store:
        queue = store.queue(flow_worker.QUEUE)
        queue.configure(
            concurrency=LIMIT, key_concurrency=KEY_LIMIT, max_attempts=50, backoff=alkstore.Fixed(0)
        )
        with store.transaction() as tx:
            for seq in range(per_key):
                for key in range(keys):
                    tx.enqueue(flow_worker.QUEUE, {"seq": seq}, group=f"k{key}")
        fed = tmp_path / "fed"
        fed.touch()
        ctx = multiprocessing.get_context("spawn")
        paths = [tmp_path / f"runs-{n}.txt" for n in range(PROCESSES)]
        procs = [
            ctx.Process(
                target=flow_worker.main,
                args=(backend.url, backend.namespace, str(path), 8, FAIL_RATE, True, str(fed)),
            )
            for path in paths
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(240)
            assert proc.exitcode == 0
        found = runs(paths)
        assert sum(run[3] for run in found) == keys * per_key  # every job succeeded once
        assert max(run[6] for run in found) <= LIMIT  # the leases each handler saw
        assert peak([(run[4], run[5]) for run in found]) <= LIMIT
        by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for run in found:
            by_key[run[0]].append((run[4], run[5]))
        assert max(peak(intervals) for intervals in by_key.values()) <= KEY_LIMIT
        assert peak([(run[4], run[5]) for run in found]) == LIMIT  # the limit did bind
