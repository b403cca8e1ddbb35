"""Schedules (store.schedules, store.fire_schedules) on both engines, with an injected clock.

Each firing appends the schedule's event with the headers `alkstore-schedule` and
`alkstore-boundary`, once per (schedule, boundary) whatever number of runners tick.
Catch-up policies decide what fires for boundaries missed while nothing ran; a paused
schedule accumulates nothing. Bad input raises at add time and writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest

import alkstore
import relay
from tests.clock import MONDAY, Clock
from tests.conftest import Backend
from tests.events import Basket, OrderPlaced

T0 = MONDAY  # a Monday, 01:00 in Berlin
BERLIN = "Europe/Berlin"


def to_ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def iso_ms(text: str) -> int:
    return to_ms(datetime.fromisoformat(text))


def entries(store: alkstore.Store) -> list[alkstore.LogEntry]:
    out: list[alkstore.LogEntry] = []
    while batch := store.log.read(after=out[-1].position if out else 0, limit=1_000):
        out.extend(batch)
    return out


def fired(store: alkstore.Store, name: str | None = None) -> list[int]:
    """Boundaries (epoch ms) of the fired events, in log order (of one schedule, or all)."""
    return [
        iso_ms(e.headers["alkstore-boundary"])
        for e in entries(store)
        if name is None or e.headers.get("alkstore-schedule") == name
    ]


def fired_local(store: alkstore.Store, name: str, tz: str = BERLIN) -> list[str]:
    return [
        datetime.fromtimestamp(b / 1000, UTC).astimezone(ZoneInfo(tz)).isoformat()
        for b in fired(store, name)
    ]


def tick_until(store: alkstore.Store, clock: Clock, until: datetime, step: float) -> int:
    """A live runner: tick every `step` seconds of clock time up to `until`."""
    total = 0
    while clock.now < until.timestamp():
        clock.advance(step)
        total += store.fire_schedules()
    return total


# -- add / get / list ---------------------------------------------------------------------------


def test_add_returns_the_schedule_with_its_next_fire_times(
    sstore: alkstore.Store, clock: Clock
) -> None:
    s = sstore.schedules.add("heartbeat", every="30s", event=OrderPlaced(order_id=1), key="k1")
    assert s.name == "heartbeat" and s.every_ms == 30_000 and s.cron is None
    assert s.tz == "UTC" and s.catch_up == "latest" and s.key == "k1"
    assert s.event_type == "test.order_placed"
    assert not s.paused and s.last_fired is None
    assert s.start_at == clock.ms and s.next_fire_at == clock.ms  # the first boundary is now
    assert s.next_fire_time == T0
    assert s.next_fires == [T0 + timedelta(seconds=30 * k) for k in range(5)]
    got = sstore.schedules.get("heartbeat", upcoming=2)
    assert got.next_fires == [T0, T0 + timedelta(seconds=30)]
    assert got.name == s.name and got.next_fire_at == s.next_fire_at


def test_cron_next_fire_times_are_wall_clock_times_in_the_zone(sstore: alkstore.Store) -> None:
    s = sstore.schedules.add(
        "standup", cron="0 9 * * 1-5", tz=BERLIN, event=OrderPlaced(order_id=1)
    )
    # 09:00 CET is 08:00 UTC; Monday to Friday, then the next Monday
    days = [5, 6, 7, 8, 9, 12]
    assert sstore.schedules.get("standup", upcoming=6).next_fires == [
        datetime(2026, 1, d, 8, tzinfo=UTC) for d in days
    ]
    assert s.next_fire_time == datetime(2026, 1, 5, 8, tzinfo=UTC)


def test_first_cron_boundary_is_at_or_after_now(sstore: alkstore.Store, clock: Clock) -> None:
    clock.set(datetime(2026, 1, 5, 12, 0, tzinfo=UTC))
    on = sstore.schedules.add("on", cron="0 12 * * *", event=OrderPlaced(order_id=1))
    assert on.next_fire_time == datetime(2026, 1, 5, 12, tzinfo=UTC)
    clock.advance(0.5)
    past = sstore.schedules.add("past", cron="0 12 * * *", event=OrderPlaced(order_id=1))
    assert past.next_fire_time == datetime(2026, 1, 6, 12, tzinfo=UTC)


def test_start_at_delays_the_first_boundary(sstore: alkstore.Store, clock: Clock) -> None:
    later = T0 + timedelta(hours=1)
    a = sstore.schedules.add("a", every="10m", start_at=later, event=OrderPlaced(order_id=1))
    b = sstore.schedules.add(
        "b", every="10m", start_at=later.timestamp() + 5, event=OrderPlaced(order_id=2)
    )
    assert a.next_fire_time == later and a.start_at == to_ms(later)
    assert b.next_fire_time == later + timedelta(seconds=5)
    clock.advance(3599)
    assert sstore.fire_schedules() == 0
    clock.advance(1)
    assert sstore.fire_schedules() == 1
    clock.advance(5)
    assert sstore.fire_schedules() == 1
    assert fired(sstore) == [to_ms(later), to_ms(later) + 5_000]
    with pytest.raises(alkstore.InvalidArgument, match="timezone-aware"):
        sstore.schedules.add(
            "c", every="1m", start_at=datetime(2030, 1, 1), event=OrderPlaced(order_id=1)
        )
    assert [s.name for s in sstore.schedules.list()] == ["a", "b"]


def test_start_at_in_the_past_fires_from_now_on(sstore: alkstore.Store, clock: Clock) -> None:
    s = sstore.schedules.add(
        "old",
        every="1m",
        start_at=T0 - timedelta(minutes=10, seconds=30),
        catch_up="all",
        event=OrderPlaced(order_id=1),
    )
    # boundaries keep the phase of start_at; the ones before now never fire
    assert s.next_fire_time == T0 + timedelta(seconds=30)
    clock.advance(30)
    assert sstore.fire_schedules() == 1
    assert fired(sstore) == [to_ms(T0) + 30_000]


def test_list_is_sorted_by_name(sstore: alkstore.Store) -> None:
    for name in ["zeta", "alpha", "mid"]:
        sstore.schedules.add(name, every="1h", event=OrderPlaced(order_id=1))
    listed = sstore.schedules.list()
    assert [s.name for s in listed] == ["alpha", "mid", "zeta"]
    assert all(s.every_ms == 3_600_000 for s in listed)


def test_next_schedule_due(sstore: alkstore.Store, clock: Clock) -> None:
    assert sstore.next_schedule_due() is None
    sstore.schedules.add("a", every="30s", event=OrderPlaced(order_id=1))
    sstore.schedules.add("b", every="1m", start_at=clock.now + 10, event=OrderPlaced(order_id=1))
    assert sstore.next_schedule_due() == 0.0
    sstore.fire_schedules()
    assert sstore.next_schedule_due() == 10.0
    clock.advance(12)
    assert sstore.next_schedule_due() == -2.0  # overdue
    sstore.schedules.pause("a")
    sstore.schedules.pause("b")
    assert sstore.next_schedule_due() is None  # paused schedules are not due


# -- firing ---------------------------------------------------------------------------------


def test_firing_appends_the_event_with_the_schedule_headers_once(
    sstore: alkstore.Store, clock: Clock
) -> None:
    sstore.schedules.add("beat", every="30s", event=OrderPlaced(order_id=7), key="k7")
    assert sstore.fire_schedules() == 1
    assert sstore.fire_schedules() == 0  # the same boundary never fires twice
    [entry] = entries(sstore)
    assert entry.type == "test.order_placed" and entry.key == "k7"
    assert entry.payload == OrderPlaced(order_id=7)
    assert entry.headers == {
        "alkstore-schedule": "beat",
        "alkstore-boundary": "2026-01-05T00:00:00+00:00",
    }
    clock.advance(29.5)
    assert sstore.fire_schedules() == 0
    clock.advance(0.5)
    assert sstore.fire_schedules() == 1
    assert sstore.fire_schedules() == 0
    s = sstore.schedules.get("beat")
    assert s.last_fired == clock.ms and s.next_fire_at == clock.ms + 30_000
    assert fired(sstore, "beat") == [to_ms(T0), to_ms(T0) + 30_000]
    assert entries(sstore)[-1].headers["alkstore-boundary"] == "2026-01-05T00:00:30+00:00"


def test_sub_second_boundaries_in_the_header(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("fast", every="1250ms", event=OrderPlaced(order_id=1), catch_up="all")
    clock.advance(3.75)
    assert sstore.fire_schedules() == 4
    headers = [e.headers["alkstore-boundary"] for e in entries(sstore)]
    assert headers == [
        "2026-01-05T00:00:00+00:00",
        "2026-01-05T00:00:01.250000+00:00",
        "2026-01-05T00:00:02.500000+00:00",
        "2026-01-05T00:00:03.750000+00:00",
    ]


def test_schedules_fire_independently(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("ten", every="10s", event=OrderPlaced(order_id=10))
    sstore.schedules.add("fifteen", every="15s", event=Basket(items=[15]), key="b")
    for _ in range(6):
        sstore.fire_schedules()
        clock.advance(5)
    assert fired(sstore, "ten") == [to_ms(T0) + k * 10_000 for k in range(3)]
    assert fired(sstore, "fifteen") == [to_ms(T0) + k * 15_000 for k in range(2)]
    payloads = {e.headers["alkstore-schedule"]: e.payload for e in entries(sstore)}
    assert payloads == {"ten": OrderPlaced(order_id=10), "fifteen": Basket(items=[15])}


def test_firing_wakes_listeners(sstore: alkstore.Store) -> None:
    listener = sstore.listen()
    # settle, as in test_wake.py: on SQLite a commit in the first moments after listen()
    # can be missed while the watcher thread starts; PostgreSQL wakes once when connected
    listener.wait(1.0)
    while listener.wait(0.05):
        pass
    sstore.schedules.add("beat", every="1m", event=OrderPlaced(order_id=1))
    assert sstore.fire_schedules() == 1
    assert listener.wait(10)
    assert sstore.log.head() == 1


def test_many_runners_ticking_at_once_fire_each_boundary_once(
    backend: Backend, sstore: alkstore.Store, clock: Clock
) -> None:
    """Four stores (own connections) tick together at each step of a shared clock."""
    sstore.schedules.add("s1", every="1s", event=OrderPlaced(order_id=1), catch_up="all")
    sstore.schedules.add("s2", every="2s", event=OrderPlaced(order_id=2))
    sstore.schedules.add("s3", cron="@seconds-first */3 * * * * *", event=OrderPlaced(order_id=3))
    runners = [backend.connect(clock=clock) for _ in range(4)]
    steps = 20
    start, done = threading.Barrier(5, timeout=60), threading.Barrier(5, timeout=60)
    counts = [0] * len(runners)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            for _ in range(steps):
                start.wait()
                counts[i] += runners[i].fire_schedules()
                done.wait()
        except BaseException as exc:
            errors.append(exc)
            start.abort()
            done.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(runners))]
    try:
        for t in threads:
            t.start()
        for _ in range(steps):
            start.wait()
            done.wait()
            clock.advance(1)
    finally:
        for t in threads:
            t.join(timeout=60)
        for r in runners:
            r.close()
    assert not errors, errors
    t0 = to_ms(T0)
    assert fired(sstore, "s1") == [t0 + k * 1_000 for k in range(steps)]
    assert fired(sstore, "s2") == [t0 + k * 2_000 for k in range(steps // 2)]
    assert fired(sstore, "s3") == [t0 + k * 3_000 for k in range(7)]  # 0, 3, ..., 18 s
    assert sum(counts) == len(entries(sstore)) == steps + steps // 2 + 7


# -- catch-up -----------------------------------------------------------------------------------


def test_catch_up_latest_fires_the_most_recent_missed_boundary_once(
    sstore: alkstore.Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1), catch_up="latest")
    clock.advance(53)  # boundaries at 0, 10, ..., 50 s were missed
    with caplog.at_level(logging.WARNING, logger="alkstore.scheduler"):
        assert sstore.fire_schedules() == 1
    assert fired(sstore) == [to_ms(T0) + 50_000]
    assert "schedule s: skipped 1 missed boundaries (catch_up=latest)" in caplog.text
    assert sstore.fire_schedules() == 0
    clock.advance(7)
    assert sstore.fire_schedules() == 1
    assert fired(sstore) == [to_ms(T0) + 50_000, to_ms(T0) + 60_000]


def test_catch_up_all_fires_every_missed_boundary(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1), catch_up="all")
    clock.advance(53)
    assert sstore.fire_schedules() == 6
    assert fired(sstore) == [to_ms(T0) + k * 10_000 for k in range(6)]
    assert sstore.fire_schedules() == 0
    assert sstore.schedules.get("s").next_fire_at == to_ms(T0) + 60_000


def test_catch_up_all_is_bounded_and_warns(
    sstore: alkstore.Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    sstore.schedules.add("s", every="1s", event=OrderPlaced(order_id=1), catch_up="all")
    clock.advance(250)  # 251 boundaries due
    with caplog.at_level(logging.WARNING, logger="alkstore.scheduler"):
        assert sstore.fire_schedules() == alkstore._schedules.MAX_CATCH_UP == 100
    assert fired(sstore) == [to_ms(T0) + k * 1_000 for k in range(151, 251)]
    assert "schedule s: skipped more than 100 missed boundaries (catch_up=all)" in caplog.text
    clock.advance(1)
    assert sstore.fire_schedules() == 1


def test_catch_up_none_skips_missed_boundaries(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1), catch_up="none")
    clock.advance(57)  # the latest boundary (50 s) is 7 s old: later than half a period
    assert sstore.fire_schedules() == 0
    assert sstore.schedules.get("s").next_fire_at == to_ms(T0) + 60_000
    clock.advance(3 + 5)  # 5 s after the 60 s boundary: still on time
    assert sstore.fire_schedules() == 1
    assert fired(sstore) == [to_ms(T0) + 60_000]


def test_catch_up_none_on_time_window_is_capped_at_a_minute(
    sstore: alkstore.Store, clock: Clock
) -> None:
    sstore.schedules.add("hourly", cron="0 * * * *", event=OrderPlaced(order_id=1), catch_up="none")
    clock.advance(60)  # the 00:00 boundary is 60 s old: on time
    assert sstore.fire_schedules() == 1
    clock.set(datetime(2026, 1, 5, 1, 1, 0, 500_000, tzinfo=UTC))  # 60.5 s after 01:00
    assert sstore.fire_schedules() == 0
    assert fired(sstore, "hourly") == [to_ms(T0)]


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
def test_live_runner_fires_every_boundary_under_every_policy(
    sstore: alkstore.Store, clock: Clock, catch_up: Any
) -> None:
    sstore.schedules.add("s", every="2s", event=OrderPlaced(order_id=1), catch_up=catch_up)
    sstore.fire_schedules()
    tick_until(sstore, clock, T0 + timedelta(seconds=20), step=0.5)
    assert fired(sstore) == [to_ms(T0) + k * 2_000 for k in range(11)]


# -- pause / resume / remove ------------------------------------------------------------------


def test_paused_schedules_do_not_accumulate(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1), catch_up="all")
    assert sstore.fire_schedules() == 1
    sstore.schedules.pause("s")
    assert sstore.schedules.get("s").paused
    clock.advance(95)
    assert sstore.fire_schedules() == 0
    sstore.schedules.resume("s")
    s = sstore.schedules.get("s")
    assert not s.paused and s.next_fire_at == to_ms(T0) + 100_000  # the next after now
    assert sstore.fire_schedules() == 0
    clock.advance(5)
    assert sstore.fire_schedules() == 1
    assert fired(sstore) == [to_ms(T0), to_ms(T0) + 100_000]


def test_resume_at_a_boundary_fires_from_the_next_one(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1), catch_up="all")
    sstore.schedules.pause("s")
    clock.advance(30)  # exactly a boundary
    sstore.schedules.resume("s")
    assert sstore.fire_schedules() == 0
    assert sstore.schedules.get("s").next_fire_at == to_ms(T0) + 40_000


def test_pause_and_resume_are_idempotent(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1), catch_up="all")
    clock.advance(25)
    sstore.schedules.resume("s")  # not paused: nothing changes, nothing is skipped
    assert sstore.schedules.get("s").next_fire_at == to_ms(T0)
    assert sstore.fire_schedules() == 3
    sstore.schedules.pause("s")
    sstore.schedules.pause("s")
    assert sstore.schedules.get("s").paused
    sstore.schedules.resume("s")
    sstore.schedules.resume("s")
    assert sstore.schedules.get("s").next_fire_at == to_ms(T0) + 30_000


def test_pause_between_read_and_advance_wins(sstore: alkstore.Store, clock: Clock) -> None:
    """A paused schedule is not advanced by a tick that saw it due (the CAS checks paused)."""
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1))
    sstore.schedules.pause("s")
    clock.advance(10)
    assert sstore.fire_schedules() == 0
    assert entries(sstore) == []


def test_remove(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1))
    sstore.schedules.add("keep", every="10s", event=OrderPlaced(order_id=2))
    sstore.schedules.remove("s")
    assert [s.name for s in sstore.schedules.list()] == ["keep"]
    assert sstore.fire_schedules() == 1
    assert [e.headers["alkstore-schedule"] for e in entries(sstore)] == ["keep"]
    for call in (
        lambda: sstore.schedules.remove("s"),
        lambda: sstore.schedules.get("s"),
        lambda: sstore.schedules.pause("s"),
        lambda: sstore.schedules.resume("s"),
        lambda: sstore.schedules.update("s", every="5s"),
    ):
        with pytest.raises(alkstore.InvalidArgument, match="no schedule named 's'"):
            call()


# -- update -------------------------------------------------------------------------------------


def test_update_interval_recomputes_the_next_boundary(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1))
    assert sstore.fire_schedules() == 1
    clock.advance(3)
    s = sstore.schedules.update("s", every="4s")
    # boundaries keep start_at's phase: 0, 4, 8, ...; the first at or after now is 4 s
    assert s.every_ms == 4_000 and s.next_fire_at == to_ms(T0) + 4_000
    assert s.next_fires[:3] == [T0 + timedelta(seconds=k) for k in (4, 8, 12)]
    clock.advance(1)
    assert sstore.fire_schedules() == 1


def test_update_to_cron_clears_every_and_back(sstore: alkstore.Store) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1), tz=BERLIN)
    s = sstore.schedules.update("s", cron="0 9 * * *")
    assert s.cron == "0 9 * * *" and s.every_ms is None and s.tz == BERLIN
    assert s.next_fire_time == datetime(2026, 1, 5, 8, tzinfo=UTC)
    s = sstore.schedules.update("s", every="1h")
    assert s.cron is None and s.every_ms == 3_600_000


def test_update_event_key_tz_and_catch_up(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", cron="0 9 * * *", event=OrderPlaced(order_id=1))
    s = sstore.schedules.update(
        "s", event=Basket(items=[1, 2]), key="basket", tz=BERLIN, catch_up="all"
    )
    assert (s.event_type, s.key, s.tz, s.catch_up) == ("test.basket", "basket", BERLIN, "all")
    assert s.next_fire_time == datetime(2026, 1, 5, 8, tzinfo=UTC)
    clock.set(datetime(2026, 1, 5, 8, tzinfo=UTC))
    assert sstore.fire_schedules() == 1
    [entry] = entries(sstore)
    assert entry.payload == Basket(items=[1, 2]) and entry.key == "basket"


def test_update_keeps_a_paused_schedule_paused(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1))
    sstore.schedules.pause("s")
    assert sstore.schedules.update("s", every="5s").paused
    clock.advance(60)
    assert sstore.fire_schedules() == 0


def test_bad_updates_change_nothing(sstore: alkstore.Store) -> None:
    before = sstore.schedules.add("s", every="10s", event=OrderPlaced(order_id=1))
    bad: list[dict[str, Any]] = [
        {"cron": "not a cron"},
        {"every": "soon"},
        {"every": 0},
        {"tz": "Nowhere/Special"},
        {"catch_up": "some"},
        {"cron": "* * * * *", "every": "1s"},
        {"paused": True},
        {"next_fire_at": 0},
    ]
    for changes in bad:
        with pytest.raises(alkstore.InvalidArgument):
            sstore.schedules.update("s", **changes)
    assert sstore.schedules.get("s") == before


def test_update_of_another_field_keeps_the_interval(sstore: alkstore.Store) -> None:
    sstore.schedules.add("s", every="1001ms", event=OrderPlaced(order_id=1))
    assert sstore.schedules.get("s").every_ms == 1001
    assert sstore.schedules.update("s", catch_up="all").every_ms == 1001


# -- bad input ----------------------------------------------------------------------------------

EVENT = OrderPlaced(order_id=1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cron": "61 * * * *"},
        {"cron": "nonsense"},
        {"cron": ""},
        {"cron": "0 3 * * *", "tz": "Europe/Atlantis"},
        {"every": "30s", "tz": ""},
        {"every": "0s"},
        {"every": "-5s"},
        {"every": 0},
        {"every": -1.5},
        {"every": "30"},
        {"every": "5 minutes"},
        {"every": float("nan")},
        {},
        {"cron": "0 3 * * *", "every": "1h"},
        {"every": "1m", "catch_up": "sometimes"},
        {"every": "1m", "start_at": datetime(2030, 1, 1)},
        {"every": "1m", "start_at": -1},
    ],
    ids=lambda kw: ",".join(f"{k}={v!r}" for k, v in kw.items()) or "neither",
)
def test_bad_input_raises_and_writes_nothing(
    sstore: alkstore.Store, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(alkstore.InvalidArgument):
        sstore.schedules.add("s", **{"event": EVENT, **kwargs})
    assert sstore.schedules.list() == []
    assert sstore.fire_schedules() == 0 and sstore.log.head() == 0


def test_bad_event_or_key_raises_and_writes_nothing(sstore: alkstore.Store) -> None:
    with pytest.raises(alkstore.EventError):
        sstore.schedules.add("s", every="1m", event={"order_id": 1})  # type: ignore[arg-type]
    with pytest.raises(alkstore.InvalidArgument):  # as for appends: a key must be a str
        sstore.schedules.add("s", every="1m", event=EVENT, key=5)  # type: ignore[arg-type]
    assert sstore.schedules.list() == []
    assert sstore.fire_schedules() == 0 and sstore.log.head() == 0


@pytest.mark.parametrize("name", ["", "Bad", "has-dash", "1st", "x" * 41, "a b"])
def test_bad_names_raise_invalid_name(sstore: alkstore.Store, name: str) -> None:
    with pytest.raises(alkstore.InvalidName):
        sstore.schedules.add(name, every="1m", event=EVENT)
    assert sstore.schedules.list() == []


def test_duplicate_name_raises_and_keeps_the_original(sstore: alkstore.Store) -> None:
    original = sstore.schedules.add("s", every="1m", event=OrderPlaced(order_id=1))
    with pytest.raises(alkstore.InvalidArgument, match="already exists"):
        sstore.schedules.add("s", cron="0 3 * * *", event=OrderPlaced(order_id=2))
    assert sstore.schedules.list() == [msgspec.structs.replace(original, next_fires=[])]
    assert sstore.fire_schedules() == 1
    assert [e.payload for e in entries(sstore)] == [OrderPlaced(order_id=1)]


def test_never_matching_cron_is_invalid_argument(sstore: alkstore.Store) -> None:
    with pytest.raises(alkstore.InvalidArgument):
        sstore.schedules.add("feb30", cron="0 0 30 2 *", event=EVENT)
    assert sstore.schedules.list() == []


# -- time zones end to end ----------------------------------------------------------------------


def test_spring_forward_fires_at_the_end_of_the_gap(sstore: alkstore.Store, clock: Clock) -> None:
    clock.set(datetime.fromisoformat("2026-03-28T12:00:00+01:00"))
    sstore.schedules.add("night", cron="30 2 * * *", tz=BERLIN, event=EVENT)
    sstore.schedules.add("half", cron="*/30 * * * *", tz=BERLIN, event=EVENT)
    tick_until(sstore, clock, datetime.fromisoformat("2026-03-30T12:00:00+02:00"), step=300)
    assert fired_local(sstore, "night") == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    night = [e for e in entries(sstore) if e.headers["alkstore-schedule"] == "night"]
    assert night[0].headers["alkstore-boundary"] == "2026-03-29T01:00:00+00:00"
    half = fired_local(sstore, "half")
    assert "2026-03-29T01:30:00+01:00" in half
    assert half[half.index("2026-03-29T01:30:00+01:00") + 1] == "2026-03-29T03:00:00+02:00"
    # 12:00 on the 28th to 12:00 on the 30th, without 02:00 and 02:30 on the 29th
    assert len(half) == len(set(half)) == 2 * 48 + 1 - 2


def test_fall_back_fires_a_repeated_wall_time_once(sstore: alkstore.Store, clock: Clock) -> None:
    clock.set(datetime.fromisoformat("2026-10-24T12:00:00+02:00"))
    sstore.schedules.add("night", cron="30 2 * * *", tz=BERLIN, event=EVENT, catch_up="all")
    sstore.schedules.add("half", cron="*/30 * * * *", tz=BERLIN, event=EVENT, catch_up="all")
    tick_until(sstore, clock, datetime.fromisoformat("2026-10-26T12:00:00+01:00"), step=300)
    assert fired_local(sstore, "night") == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    half = fired_local(sstore, "half")
    i = half.index("2026-10-25T02:30:00+02:00")
    assert half[i - 1 : i + 2] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T03:00:00+01:00",
    ]
    walls = [t[:19] for t in half]
    assert len(walls) == len(set(walls))  # no wall-clock time twice


def test_outage_across_the_fall_back_fires_a_repeated_time_once(
    sstore: alkstore.Store, clock: Clock
) -> None:
    clock.set(datetime.fromisoformat("2026-10-24T12:00:00+02:00"))
    sstore.schedules.add("night", cron="30 2 * * *", tz=BERLIN, event=EVENT)
    tick_until(sstore, clock, datetime.fromisoformat("2026-10-25T02:20:00+02:00"), step=600)
    clock.set(datetime.fromisoformat("2026-10-25T02:10:00+01:00"))  # down for 50 minutes
    tick_until(sstore, clock, datetime.fromisoformat("2026-10-25T12:00:00+01:00"), step=600)
    assert len(fired_local(sstore, "night")) == 1, fired_local(sstore, "night")


def test_catch_up_all_across_the_fall_back_fires_a_repeated_time_once(
    sstore: alkstore.Store, clock: Clock
) -> None:
    clock.set(datetime.fromisoformat("2026-10-24T12:00:00+02:00"))
    sstore.schedules.add("night", cron="30 2 * * *", tz=BERLIN, event=EVENT, catch_up="all")
    clock.set(datetime.fromisoformat("2026-10-25T12:00:00+01:00"))  # nothing ran overnight
    sstore.fire_schedules()
    assert fired_local(sstore, "night") == ["2026-10-25T02:30:00+02:00"]


# -- fencing and runners ----------------------------------------------------------------------


def test_a_stale_lease_fires_nothing(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.schedules.add("s", every="10s", event=EVENT, catch_up="all")
    old = sstore.lease("scheduler", ttl=3)
    assert old.acquire()
    assert sstore.fire_schedules(old) == 1
    clock.advance(3.5)  # old's holder stalls past its ttl; another takes over
    new = sstore.lease("scheduler", ttl=3)
    assert new.acquire()
    clock.advance(7)
    with pytest.raises(alkstore.AlkstoreError, match="lease lost"):
        sstore.fire_schedules(old)
    assert fired(sstore) == [to_ms(T0)]
    assert sstore.schedules.get("s").next_fire_at == to_ms(T0) + 10_000
    assert sstore.fire_schedules(new) == 1
    assert fired(sstore) == [to_ms(T0), to_ms(T0) + 10_000]


def test_relay_runs_the_embedded_scheduler(store: alkstore.Store) -> None:
    """A real clock: the relay loop fires an every-1 s schedule while it runs."""
    added = store.schedules.add("beat", every="1s", event=EVENT, catch_up="all")
    runner = relay.Relay(store)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="relay-under-test")
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while store.log.head() < 3 and time.monotonic() < deadline and not errors:
            time.sleep(0.1)
    finally:
        runner.stop()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the relay did not stop"
    assert not errors, errors
    boundaries = fired(store, "beat")
    counts = Counter(boundaries)
    assert not [b for b, n in counts.items() if n > 1], "a boundary fired twice"
    assert len(boundaries) >= 3, boundaries
    assert boundaries[0] == added.next_fire_at
    assert all(b - a == 1_000 for a, b in pairwise(boundaries)), boundaries
    info = store.lease("relay", 3).holder_info()
    assert info is not None and info[2].timestamp() == 0, "the relay kept its lease"
    head = store.log.head()
    time.sleep(1.5)  # a boundary came due meanwhile
    assert store.log.head() == head, "fired after the relay stopped"


def test_relay_without_schedules_fires_nothing(store: alkstore.Store) -> None:
    store.schedules.add("beat", every="1s", event=EVENT)  # its first boundary is due now
    runner = relay.Relay(store, schedules=False, poll=0.1)
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        time.sleep(0.6)
    finally:
        runner.stop()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert store.log.head() == 0


def test_run_now_appends_the_event_once_and_keeps_the_boundaries(
    sstore: alkstore.Store, clock: Clock
) -> None:
    sstore.schedules.add("nightly", cron="0 3 * * *", event=OrderPlaced(order_id=5, total_cents=1))
    sstore.schedules.pause("nightly")
    before = sstore.schedules.get("nightly")
    sstore.schedules.run_now("nightly")
    (entry,) = sstore.log.read()
    assert entry.type == "test.order_placed" and entry.headers == {
        "alkstore-schedule": "nightly",
        "alkstore-run": "now",
    }
    after = sstore.schedules.get("nightly")
    assert (after.paused, after.next_fire_at, after.last_fired) == (
        before.paused,
        before.next_fire_at,
        before.last_fired,
    )
    with pytest.raises(alkstore.InvalidArgument, match="no schedule named"):
        sstore.schedules.run_now("missing")
