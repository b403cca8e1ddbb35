"""A sweeper killed mid-sweep does not keep the sweep lock (ADR 0006).

A child process takes the namespace's sweep lock, reports from inside its first batch
and sleeps; the parent SIGKILLs it. PostgreSQL: the lock is a transaction's, and the
server ends the dead session's transaction: the next sweep runs at once. SQLite: the
lock is a lease row, which lapses SWEEP_LOCK_TTL_MS after the dead sweeper took it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import alkstore
from alkstore.sqlite import _engine as sqlite_engine
from tests.clock import Clock
from tests.conftest import Backend

ROOT = Path(__file__).resolve().parents[2]
START = 1_700_000_000.0

SWEEP_AND_SLEEP = """
import sys, time
import alkstore
start = float(sys.argv[3])
store = alkstore.connect(sys.argv[1], namespace=sys.argv[2], clock=lambda: start)
real_run = store.engine.run

def run(name, params):
    if name == "sweep_expired":
        print("sweeping", flush=True)
        time.sleep(300)
    return real_run(name, params)

store.engine.run = run
store.sweep()
"""


def kill_a_sweeper_mid_sweep(backend: Backend) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", SWEEP_AND_SLEEP, backend.url, backend.namespace, str(START)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        readable, _, _ = select.select([child.stdout], [], [], 60)
        assert readable, "the child did not start its sweep within 60 s"
        line = child.stdout.readline()
        assert line == "sweeping\n", f"the child did not sweep: {child.stderr.read()}"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def test_a_sweeper_killed_mid_sweep_does_not_keep_the_lock(backend: Backend) -> None:
    clock = Clock(START + 1)
    with backend.migrated(clock=clock) as store:
        kill_a_sweeper_mid_sweep(backend)
        if backend.name == "sqlite":
            assert store.sweep() == alkstore.SweepResult(ran=False)  # the lease row holds
            clock.now = START + sqlite_engine.SWEEP_LOCK_TTL_MS / 1000
        assert store.sweep() == alkstore.SweepResult(True, 0, 0, 0)
        assert store.sweep() == alkstore.SweepResult(True, 0, 0, 0)
