"""Scheduler runners under SIGKILL: every boundary fires exactly once, with no gaps.

Three `alkstore scheduler` subprocesses run at once with a 1 s lease against a few
fast schedules (catch_up="all"). The active one (the "scheduler" lease's holder,
`host:pid:random`) is killed with SIGKILL twice and replaced; a standby takes over
and fires the boundaries missed meanwhile. Then every runner is killed for a few
seconds (an outage), and a mix of one `alkstore relay` (the embedded scheduler, under
the relay's lease) and one `alkstore scheduler` comes back: both fire at once, and
catch-up refills the outage. At the end, for each schedule, every boundary from the
first to the last fired is exactly one event (its `alkstore-boundary` header), in
boundary order.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import alkstore
import relay
from alkstore._schedules import next_after
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.processes import CliProcess

LEASE_TTL = 1.0
TAKEOVER_BOUND = 15.0  # seconds from a kill to a new live holder (3 x ttl + a loaded machine)
LEADER_WAIT = 30.0  # processes may start slowly on a busy machine
# seconds between kills; CI runs ~30 s per engine, a soak run sets e.g. ALKSTORE_SOAK_PHASE=60
PHASE = float(os.environ.get("ALKSTORE_SOAK_PHASE", "5"))
OUTAGE = 3.0  # seconds with no runner at all
FINAL = 6.0  # seconds the relay + scheduler mix runs
SCHEDULES: dict[str, dict[str, Any]] = {
    "second": {"every": "1s"},
    "odd": {"every": "1.3s"},
    "longer": {"every": "1.5s"},
    "tick": {"cron": "@seconds-first * * * * * *", "tz": "Europe/Berlin"},  # a seconds field
}


class Runner(CliProcess):
    """One `alkstore scheduler` or `alkstore relay` subprocess, its output in a log file."""

    def __init__(self, backend: Backend, kind: str, log_path: Path) -> None:
        args = ["--db", backend.url, "--namespace", backend.namespace]
        super().__init__(kind, [*args, "--lease-ttl", str(LEASE_TTL)], log_path)


class Runners:
    def __init__(self, backend: Backend, log_dir: Path) -> None:
        self.backend = backend
        self.log_dir = log_dir
        self.all: list[Runner] = []

    def start(self, kind: str = "scheduler") -> Runner:
        runner = Runner(self.backend, kind, self.log_dir / f"{kind}-{len(self.all):02d}.log")
        self.all.append(runner)
        return runner

    def live(self) -> list[Runner]:
        return [r for r in self.all if r.alive()]

    def by_pid(self, pid: int) -> Runner | None:
        return next((r for r in self.all if r.pid == pid), None)

    def check_alive(self) -> None:
        """Only the runners the test killed may be dead (and a dead one fails loudly)."""
        for r in self.all:
            assert r.alive() or r.proc.returncode == -signal.SIGKILL, r.describe()

    def describe(self) -> str:
        return "\n".join(r.describe() for r in self.all)

    def close(self) -> None:
        errors = []
        for runner in self.all:
            try:
                runner.close()
            except Exception as exc:  # reap the others anyway
                errors.append(exc)
        if errors:
            raise errors[0]


@contextmanager
def runners(backend: Backend, log_dir: Path) -> Iterator[Runners]:
    fleet = Runners(backend, log_dir)
    try:
        yield fleet
    finally:
        fleet.close()


def holder(store: alkstore.Store, lease: str) -> tuple[int, int] | None:
    """(pid, token) of the lease's holder while its lease runs, else None."""
    info = store.lease(lease, LEASE_TTL).holder_info()
    if info is None:
        return None
    name, token, expires_at = info
    if expires_at.timestamp() <= time.time():
        return None
    _host, pid, _random = name.rsplit(":", 2)
    return int(pid), token


def wait_for_leader(
    store: alkstore.Store, fleet: Runners, timeout: float, not_pid: int | None = None
) -> tuple[Runner, int]:
    """The live scheduler process holding an unexpired "scheduler" lease, and its token."""
    deadline = time.monotonic() + timeout
    while True:
        held = holder(store, "scheduler")
        if held is not None and held[0] != not_pid:
            runner = fleet.by_pid(held[0])
            assert runner is not None, f"the lease is held by pid {held[0]}, not one of ours"
            if runner.alive():
                return runner, held[1]
        fleet.check_alive()
        assert time.monotonic() < deadline, (
            f"no scheduler took the lease within {timeout} s:\n{fleet.describe()}"
        )
        time.sleep(0.02)


def boundaries(store: alkstore.Store) -> dict[str, list[int]]:
    """Each schedule's fired boundaries (epoch ms), in log order."""
    out: dict[str, list[int]] = {name: [] for name in SCHEDULES}
    after = 0
    while batch := store.log.read(after=after, limit=5_000):
        for entry in batch:
            when = datetime.fromisoformat(entry.headers["alkstore-boundary"])
            out[entry.headers["alkstore-schedule"]].append(round(when.timestamp() * 1000))
        after = batch[-1].position
    return out


def sleep_watching(fleet: Runners, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        fleet.check_alive()
        time.sleep(0.1)


def wait_for_growth(store: alkstore.Store, head: int, fleet: Runners, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while store.log.head() <= head:
        fleet.check_alive()
        assert time.monotonic() < deadline, f"nothing fired for {timeout} s:\n{fleet.describe()}"
        time.sleep(0.05)


@pytest.mark.slow
def test_runners_killed_and_restarted_fire_every_boundary_exactly_once(
    store: alkstore.Store, backend: Backend, tmp_path: Path
) -> None:
    added = {
        name: store.schedules.add(name, event=OrderPlaced(order_id=i), catch_up="all", **spec)
        for i, (name, spec) in enumerate(SCHEDULES.items())
    }
    killed: list[int] = []
    with runners(backend, tmp_path) as fleet:
        for _ in range(3):
            fleet.start("scheduler")
        active, token = wait_for_leader(store, fleet, LEADER_WAIT)
        wait_for_growth(store, 0, fleet, LEADER_WAIT)

        for _ in range(2):  # kill the active scheduler twice; a standby takes over
            sleep_watching(fleet, PHASE)
            active, token = wait_for_leader(store, fleet, LEADER_WAIT)
            active.kill()
            killed.append(active.pid)
            head = store.log.head()
            successor, new_token = wait_for_leader(store, fleet, TAKEOVER_BOUND, not_pid=active.pid)
            assert new_token > token and successor.pid != active.pid
            wait_for_growth(store, head, fleet, TAKEOVER_BOUND)
            fleet.start("scheduler")  # back to three

        sleep_watching(fleet, PHASE / 2)
        for runner in fleet.live():  # an outage: nothing runs
            runner.kill()
            killed.append(runner.pid)
        outage_start = time.time()
        # a commit the server had already received when its client died still lands
        time.sleep(0.5)
        head = store.log.head()
        time.sleep(OUTAGE - 0.5)
        assert store.log.head() == head, "something fired with no runner alive"

        # a relay (embedded scheduler, the relay's lease) and a scheduler at once
        fleet.start("relay")
        fleet.start("scheduler")
        wait_for_growth(store, head, fleet, LEADER_WAIT)
        sleep_watching(fleet, FINAL)
        end = time.time()
        for runner in fleet.live():
            assert runner.terminate() == 0, runner.describe()
        outputs = {r.pid: r.output() for r in fleet.all}

    assert len(killed) >= 4
    assert any("relay is active" in out for out in outputs.values())
    fired = boundaries(store)
    for name, got in fired.items():
        s = added[name]
        counts = Counter(got)
        duplicates = sorted(b for b, n in counts.items() if n > 1)
        assert not duplicates, f"{name}: {len(duplicates)} boundaries fired twice"
        assert got == sorted(got), f"{name}: boundaries fired out of order"
        assert got[0] == s.next_fire_at, f"{name}: the first boundary never fired"
        expected = [got[0]]
        while expected[-1] < got[-1]:
            expected.append(next_after(s.cron, s.every_ms, s.tz, s.start_at, expected[-1]))
        missing = sorted(set(expected) - set(got))
        assert not missing, f"{name}: {len(missing)} boundaries never fired: {missing[:10]}"
        assert got == expected
        # it ran to the end, and the outage was refilled by catch-up
        assert got[-1] >= (end - 5) * 1000, f"{name}: stopped firing early"
        outage = (outage_start + 0.5) * 1000, (outage_start + OUTAGE) * 1000
        assert any(outage[0] < b < outage[1] for b in got), f"{name}: outage not refilled"
    period = {n: b - a for n, got in fired.items() for a, b in pairwise(got[:2])}
    assert period == {"second": 1_000, "odd": 1_300, "longer": 1_500, "tick": 1_000}


def test_an_idle_active_scheduler_keeps_its_lease(backend: Backend, store: alkstore.Store) -> None:
    store.schedules.add("sparse", every="1h", event=OrderPlaced(order_id=1))
    stores = [backend.connect(), backend.connect()]
    schedulers = [relay.Scheduler(s, lease_ttl=0.6) for s in stores]
    threads = [
        threading.Thread(target=s.run, name=f"scheduler-{i}") for i, s in enumerate(schedulers)
    ]
    try:
        threads[0].start()
        deadline = time.monotonic() + 30
        while schedulers[0].fired == 0:
            assert time.monotonic() < deadline, "the first scheduler never fired"
            time.sleep(0.02)
        first_token = schedulers[0].lease.token
        threads[1].start()
        time.sleep(2.0)  # > 3 x lease_ttl, nothing due
        info = store.lease("scheduler", 1).holder_info()
        assert info is not None
        assert info[1] == first_token, "a standby took the lease from a live scheduler"
        assert schedulers[1].lease.token is None
    finally:
        for s in schedulers:
            s.stop()
        for t in threads:
            if t.ident is not None:
                t.join(timeout=60)
        for st in stores:
            st.close()
