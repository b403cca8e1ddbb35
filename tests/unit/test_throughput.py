"""The dashboard's throughput rules (docs/adr/0023, addendum) on rows made by hand:
workers that appear, restart, vanish, die or report less than before never give a
negative rate or a spike, and a rate spans about a minute of a worker's refreshes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

import alkstore
from relay.dashboard import _throughput
from relay.dashboard._throughput import Rate, Throughput

T0 = 1_800_000_000.0


def row(
    wid: str,
    started: float,
    seen: float,
    done: int,
    *,
    queue: str = "mail",
    retried: int = 0,
    dead: int = 0,
    alive: bool = True,
) -> alkstore.WorkerInfo:
    return alkstore.WorkerInfo(
        wid,
        "host",
        1,
        [queue],
        4,
        datetime.fromtimestamp(T0 + started, UTC),
        datetime.fromtimestamp(T0 + seen, UTC),
        alive,
        0.0 if alive else 60.0,
        {queue: {"done": done, "retried": retried, "dead": dead}},
    )


def test_a_new_worker_counts_from_its_start_not_as_a_spike() -> None:
    speed = Throughput()
    assert speed.update([row("a", 0, 0, 0)]) == {"mail": Rate(0.0, 0.0, 0.0, 1)}
    assert speed.update([row("a", 0, 10, 50, retried=5, dead=1)]) == {
        "mail": Rate(5.0, 0.5, 0.1, 1)
    }


def test_a_rate_spans_the_last_minute_of_refreshes() -> None:
    speed = Throughput()
    for t, done in ((0, 0), (30, 30), (60, 60), (70, 70)):
        speed.update([row("a", 0, t, done)])
    # 100 more in the last 10 s: over the minute since the refresh at 30 s, not since 0
    assert speed.update([row("a", 0, 90, 190)])["mail"] == Rate(160 / 60, 0.0, 0.0, 1)


def test_workers_of_a_queue_add_up_and_one_without_a_rate_yet_shows_none() -> None:
    speed = Throughput()
    old = row("old", -3600, 0, 1000)  # running long before this dashboard saw it
    assert speed.update([old, row("new", 0, 0, 0)]) == {"mail": None}
    rates = speed.update([row("old", -3600, 10, 1020), row("new", 0, 10, 30)])
    assert rates == {"mail": Rate(5.0, 0.0, 0.0, 2)}


def test_a_stopped_or_dead_worker_no_longer_counts_and_a_restart_is_a_new_worker() -> None:
    speed = Throughput()
    speed.update([row("a", 0, 0, 0)])
    assert speed.update([row("a", 0, 10, 100)])["mail"] == Rate(10.0, 0.0, 0.0, 1)
    # "a" stopped (its row is gone); "b" is its restart, with counts from zero again
    assert speed.update([row("b", 12, 20, 16)])["mail"] == Rate(2.0, 0.0, 0.0, 1)
    assert speed.update([row("b", 12, 20, 16, alive=False)]) == {}
    assert speed.update([]) == {}


def test_a_counter_lower_than_before_counts_as_nothing() -> None:
    speed = Throughput()
    speed.update([row("a", -3600, 0, 500)])
    assert speed.update([row("a", -3600, 10, 400)])["mail"] == Rate(0.0, 0.0, 0.0, 1)


def test_a_row_without_counts_is_left_out() -> None:
    speed = Throughput()
    silent = alkstore.WorkerInfo(
        "x", "h", 1, ["mail"], 1, datetime.now(UTC), datetime.now(UTC), True, 0.0
    )
    assert silent.counts is None
    assert speed.update([silent]) == {}


def test_rates_read_per_second_or_per_minute() -> None:
    assert [_throughput.shown(v) for v in (0, 0.05, 0.5, 1, 1234.56)] == [
        "0",
        "3.0/min",
        "30.0/min",
        "1.0/s",
        "1,234.6/s",
    ]
    assert _throughput.cell(None, False) == "" and _throughput.cell(None, True) == "…"
