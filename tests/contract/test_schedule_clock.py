"""Schedules follow the database's clock through jumps forward and back, on both engines.

The injected Clock stands in for the database's clock (ADR 0012: `{now}` is the
database's time unless a test injects one). A jump forward fires what the catch-up
policy allows and never a boundary later than now. When the clock comes back, every
schedule resumes at its next boundary after now instead of waiting for the time it
reached during the jump, and the unique (schedule, boundary) row keeps a boundary
fired during the jump from firing a second time (docs/adr/0009-scheduler.md).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

import alkstore
from alkstore._firing import REWIND_MS
from alkstore._schedules import CatchUp
from tests.clock import MONDAY, Clock
from tests.events import OrderPlaced

T0 = MONDAY  # a Monday, on a minute boundary
T0_MS = round(T0.timestamp() * 1000)
MINUTE = 60_000
SPECS: dict[str, dict[str, Any]] = {"cron": {"cron": "* * * * *"}, "every": {"every": "1m"}}
EVENT = OrderPlaced(order_id=1)


class Runner:
    """A scheduler runner on the injected clock that checks each tick's firings."""

    def __init__(self, store: alkstore.Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.fired: list[int] = []  # boundaries (epoch ms), in log order

    def tick(self) -> list[int]:
        """One tick; the boundaries it fired (never one later than the clock's now)."""
        count = self.store.fire_schedules()
        after = self.store.log.head() - count
        new = [
            round(datetime.fromisoformat(e.headers["alkstore-boundary"]).timestamp() * 1000)
            for e in self.store.log.read(after=after, limit=1_000)
        ]
        assert len(new) == count
        late = [b for b in new if b > self.clock.ms]
        assert not late, f"fired boundaries {late} later than now ({self.clock.ms})"
        self.fired.extend(new)
        return new


def minutes(first: int, last: int) -> list[int]:
    return [T0_MS + m * MINUTE for m in range(first, last + 1)]


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
@pytest.mark.parametrize("spec", SPECS, ids=list(SPECS))
def test_clock_jump_forward_and_back_fires_nothing_early_and_keeps_firing(
    sstore: alkstore.Store,
    clock: Clock,
    spec: str,
    catch_up: CatchUp,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sstore.schedules.add("m", event=EVENT, catch_up=catch_up, **SPECS[spec])
    runner = Runner(sstore, clock)
    for m in range(5):  # a live runner on the minute: 00:00 .. 00:04
        assert runner.tick() == minutes(m, m)
        clock.advance(60)
    assert runner.tick() == minutes(5, 5)

    clock.advance(3600 + 40)  # the clock jumps +1 h (to 01:05:40)
    jumped = runner.tick()
    expected = {"latest": minutes(65, 65), "all": minutes(6, 65), "none": []}[catch_up]
    assert jumped == expected  # at most one event unless catch_up="all"; none later than now
    assert runner.tick() == []

    clock.advance(-3600)  # and comes back (to 00:05:40)
    with caplog.at_level(logging.WARNING, logger="alkstore.scheduler"):
        assert runner.tick() == []
    assert "schedule m: the clock went back 3600000 ms; next boundary 2026-01-05T00:06:00" in (
        caplog.text
    )
    assert sstore.schedules.get("m").next_fire_at == minutes(6, 6)[0]  # not 01:06
    for m in range(6, 71):  # tick each minute to 01:10: every boundary not fired yet fires
        clock.now = (T0_MS + m * MINUTE) / 1000
        assert runner.tick() == ([] if minutes(m, m)[0] in jumped else minutes(m, m))
    counts = Counter(runner.fired)
    assert not [b for b, n in counts.items() if n > 1], "a boundary fired twice"
    assert sorted(runner.fired) == minutes(0, 70)


@pytest.mark.parametrize("spec", SPECS, ids=list(SPECS))
def test_a_schedule_resumed_while_the_clock_was_ahead_fires_when_it_comes_back(
    sstore: alkstore.Store, clock: Clock, spec: str
) -> None:
    sstore.schedules.add("m", event=EVENT, **SPECS[spec])
    runner = Runner(sstore, clock)
    assert runner.tick() == minutes(0, 0)
    sstore.schedules.pause("m")
    clock.advance(3600)
    sstore.schedules.resume("m")  # next boundary: 01:01 by the jumped clock
    clock.advance(-3600 + 30)  # back to 00:00:30
    assert runner.tick() == []
    clock.advance(30)
    assert runner.tick() == minutes(1, 1)


@pytest.mark.parametrize("step", [0.3, 2.0], ids=["0.3s", "2s"])
def test_a_step_back_right_after_a_firing_fires_nothing_twice(
    sstore: alkstore.Store, clock: Clock, step: float
) -> None:
    """An NTP step back over a boundary that just fired: below REWIND_MS the schedule keeps
    its next boundary; above, it goes back to the one just fired, which does not fire again."""
    sstore.schedules.add("s", every="10s", event=EVENT, catch_up="all")
    runner = Runner(sstore, clock)
    assert runner.tick() == [T0_MS]
    clock.advance(10)
    assert runner.tick() == [T0_MS + 10_000]
    clock.advance(-step)
    assert runner.tick() == []
    rewound = step * 1000 > REWIND_MS
    assert sstore.schedules.get("s").next_fire_at == T0_MS + (10_000 if rewound else 20_000)
    clock.advance(step)
    assert runner.tick() == []  # the 10 s boundary again: already fired
    clock.advance(10)
    assert runner.tick() == [T0_MS + 20_000]
    assert sstore.schedules.get("s").next_fire_at == T0_MS + 30_000
    assert runner.fired == [T0_MS, T0_MS + 10_000, T0_MS + 20_000]


def test_a_clock_going_back_never_fires_before_start_at(
    sstore: alkstore.Store, clock: Clock
) -> None:
    start = T0_MS + 2 * 3600_000
    sstore.schedules.add("late", cron="*/5 * * * *", start_at=start / 1000, event=EVENT)
    runner = Runner(sstore, clock)
    clock.advance(3 * 3600)  # ahead, past start_at: the latest boundary (03:00) fires
    assert runner.tick() == [T0_MS + 3 * 3600_000]
    clock.advance(-3 * 3600 + 60)  # back to 00:01, before start_at
    for _ in range(119):  # each minute to 01:59
        assert runner.tick() == []
        clock.advance(60)
    assert sstore.schedules.get("late").next_fire_at == start
    assert runner.tick() == [start]  # 02:00


def test_next_schedule_due_after_the_clock_comes_back(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("m", every="1m", event=EVENT)
    sstore.fire_schedules()
    clock.advance(3600)
    sstore.fire_schedules()
    clock.advance(-3600 + 20)
    sstore.fire_schedules()  # a runner's tick: resumes at the next boundary after now
    assert sstore.next_schedule_due() == 40.0
