"""A scheduler process whose host clock jumps +1 h and back fires nothing early and keeps firing.

A real `alkstore scheduler` subprocess runs with its Python wall clock (`time.time`,
`time.time_ns`, `datetime.now`) 1 h ahead for its first seconds, then back to the
real time (the `skewed_clock/sitecustomize.py` shim on its PYTHONPATH; its log
lines' timestamps show the jump). The database's clock is untouched: schedule
boundaries follow it (ADR 0012), so while the test process watches the log with the
real clock, no event is ever for a boundary later than now, and every boundary
fires once, on time, before, during and after the jump. With the host's clock
deciding, the first tick fired 100 events an hour early (catch_up="all") and the
schedules then stayed silent for the hour.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import alkstore
from alkstore._schedules import next_after
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.processes import ROOT, CliProcess

SKEW = 3600.0
SKEWED_FOR = 6.0  # seconds from the subprocess's start; then its clock jumps back
RUN = 12.0  # seconds the scheduler runs in all
LATE = 1.5  # seconds a boundary may fire late (poll <= lease ttl / 3, a loaded machine)
START_WAIT = 30.0  # a subprocess may start slowly on a busy machine
SCHEDULES: dict[str, dict[str, Any]] = {
    "second": {"every": "1s", "catch_up": "all"},  # the worst case: up to 100 per tick
    "tick": {"cron": "@seconds-first * * * * * *", "catch_up": "latest"},  # a seconds field
}
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ .*scheduler is active", re.M)


def boundary_ms(entry: alkstore.LogEntry) -> int:
    return round(datetime.fromisoformat(entry.headers["alkstore-boundary"]).timestamp() * 1000)


@pytest.mark.slow
def test_a_host_clock_jump_fires_nothing_early_and_keeps_firing(
    store: alkstore.Store, backend: Backend, tmp_path: Path
) -> None:
    added = {
        name: store.schedules.add(name, event=OrderPlaced(order_id=i), **spec)
        for i, (name, spec) in enumerate(SCHEDULES.items())
    }
    env = {
        "PYTHONPATH": str(ROOT / "tests" / "faults" / "skewed_clock"),
        "ALKSTORE_TEST_CLOCK_SKEW": str(SKEW),
        "ALKSTORE_TEST_CLOCK_SKEW_FOR": str(SKEWED_FOR),
    }
    args = ["--db", backend.url, "--namespace", backend.namespace, "--lease-ttl", "1"]
    scheduler = CliProcess("scheduler", args, tmp_path / "scheduler.log", env)
    seen: list[tuple[str, int, float]] = []  # (schedule, boundary, real time first seen), ms
    try:
        after = 0
        while time.monotonic() - scheduler.started < RUN or not seen:
            assert scheduler.alive(), scheduler.describe()
            assert time.monotonic() - scheduler.started < RUN + START_WAIT, (
                f"nothing fired:\n{scheduler.describe()}"
            )
            batch = store.log.read(after=after, limit=1_000)
            now_ms = time.time() * 1000
            early = [
                (e.headers["alkstore-schedule"], boundary_ms(e), round(now_ms))
                for e in batch
                if boundary_ms(e) > now_ms + 5  # the database rounds to the millisecond
            ]
            assert not early, (
                f"fired {len(early)} boundaries later than the real now (schedule, boundary, "
                f"now): {early[:5]}\n{scheduler.describe()}"
            )
            seen.extend((e.headers["alkstore-schedule"], boundary_ms(e), now_ms) for e in batch)
            after = batch[-1].position if batch else after
            time.sleep(0.05)
        skewed_until = (time.time() - (time.monotonic() - scheduler.started - SKEWED_FOR)) * 1000
        end_ms = time.time() * 1000
        assert scheduler.terminate() == 0, scheduler.describe()
    finally:
        scheduler.close()

    output = scheduler.output()
    assert "skewed_clock: wall clock +3600 s" in output, output
    active = LOG_TIME.search(output)
    assert active is not None, output
    logged = datetime.fromisoformat(active[1]).timestamp()  # local time, as logging writes it
    assert logged - time.time() > SKEW / 2, f"the shim did not skew the log clock:\n{output}"

    active_at = seen[0][2]  # the first tick (the test saw its events then)
    assert any(t < skewed_until for *_, t in seen), "nothing fired while the clock was ahead"
    for name, s in added.items():
        got = [b for n, b, _ in seen if n == name]
        counts = Counter(got)
        assert not [b for b, n in counts.items() if n > 1], f"{name}: a boundary fired twice"
        assert got == sorted(got), f"{name}: boundaries out of order"
        if s.catch_up == "all":
            assert got[0] == s.next_fire_at, f"{name}: the first boundary never fired"
        expected = [got[0]]
        while expected[-1] < got[-1]:
            expected.append(next_after(s.cron, s.every_ms, s.tz, s.start_at, expected[-1]))
        assert got == expected, f"{name}: missing {sorted(set(expected) - set(got))[:10]}"
        assert got[-1] >= end_ms - 1000 * (1 + LATE), f"{name}: stopped firing after the jump"
        late = [
            (b, round(t - b))
            for n, b, t in seen
            if n == name and b > active_at and t - b > LATE * 1000
        ]
        assert not late, f"{name}: boundaries fired late (boundary, ms late): {late}"
