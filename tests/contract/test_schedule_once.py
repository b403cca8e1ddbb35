"""Each schedule boundary fires once: the two layers, each shown stopping its race alone.

A tick fires a boundary in one transaction that (1) advances the schedule's
`next_fire_at` with a compare-and-set on the value the tick read, and (2) inserts the
unique (schedule, boundary) row into the firings table, appending events only for the
rows it inserted (ADR 0009). Each test below makes the other layer let the duplicate
through, so that removing either layer alone fails a test:

- the compare-and-set alone: a runner read the schedule due, another fired the
  boundary meanwhile and its firing rows were pruned; the stale runner's advance
  finds `next_fire_at` moved and appends nothing;
- the firings row alone: an update at the very millisecond of a boundary that
  already fired sets `next_fire_at` back to it, so the next tick's compare-and-set
  passes; the firing row stops the second event.

And a new schedule fires from its next boundary, never for the current period's
boundary that passed before it was added, whatever its catch-up policy.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

import alkstore
from alkstore._schedules import CatchUp
from tests import schedule_rows
from tests.clock import MONDAY, Clock
from tests.conftest import Backend
from tests.events import OrderPlaced

T0 = MONDAY
EVENT = OrderPlaced(order_id=1)


def fired(store: alkstore.Store) -> list[datetime]:
    return [
        datetime.fromisoformat(e.headers["alkstore-boundary"]) for e in store.log.read(limit=1_000)
    ]


def test_the_compare_and_set_alone_stops_a_runner_that_read_a_fired_boundary(
    backend: Backend, sstore: alkstore.Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sstore.schedules.add("s", every="10s", event=EVENT)
    stale = backend.connect(clock=clock)
    engine: Any = stale._runtime.engine
    run = engine.run

    def run_then_race(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = run(name, params)
        if name == "schedule_due":  # the stale runner has read T0 due; meanwhile:
            assert rows and sstore.fire_schedules() == 1  # another runner fires T0
            clock.advance(0.001)
            sstore.prune_schedule_firings(older_than=0)  # and its firing row goes
            assert schedule_rows.execute(backend, "SELECT * FROM {firings}") == []
        return rows

    monkeypatch.setattr(engine, "run", run_then_race)
    try:
        assert stale.fire_schedules() == 0
    finally:
        stale.close()
    assert fired(sstore) == [T0]
    assert sstore.schedules.get("s").next_fire_time == T0 + timedelta(seconds=10)


def test_the_firings_row_alone_stops_a_boundary_set_back_by_an_update(
    backend: Backend, sstore: alkstore.Store, clock: Clock
) -> None:
    sstore.schedules.add("s", every="10s", event=EVENT)
    assert sstore.fire_schedules() == 1
    # an update at the same millisecond: the first boundary at or after now is T0 again
    assert sstore.schedules.update("s", key="k2").next_fire_time == T0
    assert schedule_rows.execute(backend, "SELECT count(*) FROM {firings}") == [(1,)]
    assert sstore.fire_schedules() == 0  # the compare-and-set passed; the firing row held
    assert fired(sstore) == [T0]
    assert sstore.schedules.get("s").next_fire_time == T0 + timedelta(seconds=10)
    clock.advance(10)
    assert sstore.fire_schedules() == 1
    assert fired(sstore) == [T0, T0 + timedelta(seconds=10)]


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
def test_a_new_schedule_fires_at_its_next_boundary_not_the_current_one(
    sstore: alkstore.Store, clock: Clock, catch_up: CatchUp
) -> None:
    """Added at 10:30, an hourly schedule first fires at 11:00, not for 10:00."""
    clock.set(T0 + timedelta(hours=10, minutes=30))
    hourly = sstore.schedules.add("hourly", cron="0 * * * *", event=EVENT, catch_up=catch_up)
    every = sstore.schedules.add("every", every="1h", start_at=T0, event=EVENT, catch_up=catch_up)
    assert hourly.next_fire_time == every.next_fire_time == T0 + timedelta(hours=11)
    assert sstore.fire_schedules() == 0
    clock.advance(30 * 60 - 0.001)
    assert sstore.fire_schedules() == 0
    clock.advance(0.001)
    assert sstore.fire_schedules() == 2
    assert fired(sstore) == [T0 + timedelta(hours=11)] * 2
