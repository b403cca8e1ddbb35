"""Schedule input that would fire other than meant is refused at add and update, on both
engines, with an InvalidArgument that says what to write instead; nothing is written.

- `every` shorter than a second (MIN_EVERY_MS): a 1 ms schedule appended an event per
  tick and logged a warning per tick for the boundaries it skipped.
- A bare six-field cron expression: croniter reads the sixth field as seconds, honker,
  Quartz and Spring read the first, so honker's `0 * * * * *` (every minute) became 60
  firings in minute 0 of every hour. The seconds field must be placed explicitly:
  `@seconds-first S M H DoM Mon DoW`.
- A wrap-around range (`30-10 * * * *`): croniter read it as every minute.
(ADR 0009, addendum "input that fires other than meant".)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import alkstore
from tests import schedule_rows
from tests.clock import MONDAY, Clock
from tests.conftest import Backend
from tests.events import OrderPlaced

T0 = MONDAY  # a Monday
EVENT = OrderPlaced(order_id=1)


def boundaries(store: alkstore.Store) -> list[datetime]:
    return [
        datetime.fromisoformat(e.headers["alkstore-boundary"]) for e in store.log.read(limit=1_000)
    ]


def refused(store: alkstore.Store, match: str, **kwargs: Any) -> str:
    """add() must raise InvalidArgument matching `match`, writing nothing; the message."""
    with pytest.raises(alkstore.InvalidArgument, match=match) as info:
        store.schedules.add("s", event=EVENT, **kwargs)
    assert store.schedules.list() == []
    assert store.fire_schedules() == 0 and store.log.head() == 0
    return str(info.value)


# -- the minimum interval -----------------------------------------------------------------------


@pytest.mark.parametrize("every", ["1ms", "999ms", "0.5s", 0.001, 0.999, "0.999s"])
def test_an_interval_under_a_second_is_refused(sstore: alkstore.Store, every: str | float) -> None:
    message = refused(sstore, "at least 1s", every=every)
    assert repr(every) in message


def test_an_interval_of_a_second_is_the_shortest_accepted(
    sstore: alkstore.Store, clock: Clock
) -> None:
    assert sstore.schedules.add("a", every="1s", event=EVENT).every_ms == 1_000
    assert sstore.schedules.add("b", every=1, event=EVENT).every_ms == 1_000
    assert sstore.schedules.add("c", every="1001ms", event=EVENT).every_ms == 1_001
    clock.advance(3)
    assert sstore.fire_schedules() == 3  # catch_up="latest": one each


def test_update_to_an_interval_under_a_second_is_refused(sstore: alkstore.Store) -> None:
    before = sstore.schedules.add("s", every="10s", event=EVENT)
    with pytest.raises(alkstore.InvalidArgument, match="at least 1s"):
        sstore.schedules.update("s", every="250ms")
    assert sstore.schedules.get("s") == before


def test_a_cron_expression_fires_at_most_once_a_second(
    sstore: alkstore.Store, clock: Clock
) -> None:
    sstore.schedules.add("s", cron="@seconds-first * * * * * *", event=EVENT, catch_up="all")
    clock.advance(2.5)
    assert sstore.fire_schedules() == 3
    assert boundaries(sstore) == [T0 + timedelta(seconds=k) for k in range(3)]


# -- six fields: where the seconds are ----------------------------------------------------------


@pytest.mark.parametrize("cron", ["0 * * * * *", "* * * * * */3", "0 0 3 * * *", "*/5 * * * * 1"])
def test_a_bare_six_field_cron_is_refused(sstore: alkstore.Store, cron: str) -> None:
    message = refused(sstore, "six-field cron expression", cron=cron)
    assert f"'@seconds-first {cron}'" in message
    assert "five fields" in message


def test_the_six_field_message_gives_the_five_field_form_for_second_zero(
    sstore: alkstore.Store,
) -> None:
    message = refused(sstore, "six-field", cron="0 * * * * *")
    assert "'* * * * *'" in message  # honker's every minute


def test_seconds_first_is_honkers_reading(sstore: alkstore.Store, clock: Clock) -> None:
    """honker's `0 * * * * *` is once a minute, at second 0: one event per minute."""
    s = sstore.schedules.add("m", cron="@seconds-first 0 * * * * *", event=EVENT, catch_up="all")
    assert s.cron == "@seconds-first 0 * * * * *"
    assert s.next_fires == [T0 + timedelta(minutes=k) for k in range(5)]
    clock.advance(120.5)
    assert sstore.fire_schedules() == 3
    assert boundaries(sstore) == [T0 + timedelta(minutes=k) for k in range(3)]


def test_seconds_first_with_hours_and_a_zone(sstore: alkstore.Store) -> None:
    s = sstore.schedules.add(
        "s", cron="@seconds-first 30 15 9 * * 1-5", tz="Europe/Berlin", event=EVENT
    )
    # 09:15:30 in Berlin (CET) is 08:15:30 UTC, Monday to Friday
    assert s.next_fires == [datetime(2026, 1, d, 8, 15, 30, tzinfo=UTC) for d in (5, 6, 7, 8, 9)]


def test_update_to_a_bare_six_field_cron_is_refused(sstore: alkstore.Store) -> None:
    before = sstore.schedules.add("s", cron="0 3 * * *", event=EVENT)
    with pytest.raises(alkstore.InvalidArgument, match="six-field"):
        sstore.schedules.update("s", cron="0 0 3 * * *")
    assert sstore.schedules.get("s") == before


@pytest.mark.parametrize(
    "cron",
    [
        "@seconds-first * * * * *",  # five fields after the prefix
        "@seconds-first 60 * * * * *",
        "@seconds-first",
        "0 0 0 1 1 * 2030",  # seven fields
        "@seconds-first 0 0 0 1 1 * 2030",
    ],
)
def test_other_field_counts_are_refused(sstore: alkstore.Store, cron: str) -> None:
    refused(sstore, "cron", cron=cron)


# -- wrap-around ranges -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "instead"),
    [
        ("30-10 * * * *", "30-59,0-10 * * * *"),
        ("0 22-2 * * *", "0 22-23,0-2 * * *"),
        ("0 0 25-5 * *", "0 0 25-31,1-5 * *"),
        ("0 0 1 nov-feb *", "0 0 1 11-12,1-2 *"),
        ("0 0 * * fri-mon", "0 0 * * 5-6,0-1"),
        ("0 0 * * sat-sun", "0 0 * * 6,0"),
        ("0 0 * * 6-1", "0 0 * * 6,0-1"),
        ("30-10/5 * * * *", "30-59/5,0-10/5 * * * *"),
        ("0,30-10 * * * *", "0,30-59,0-10 * * * *"),
        ("@seconds-first 50-10 * * * * *", "@seconds-first 50-59,0-10 * * * * *"),
    ],
)
def test_a_wrap_around_range_is_refused(sstore: alkstore.Store, cron: str, instead: str) -> None:
    message = refused(sstore, "wraps around", cron=cron)
    assert f"write {instead!r}" in message


@pytest.mark.parametrize(
    "cron", ["10-30 * * * *", "0 9 * * 1-5", "0 0 * * 5-7", "0 0 * * sun-sat", "0 0 1 jan-mar *"]
)
def test_ascending_ranges_are_accepted(sstore: alkstore.Store, cron: str) -> None:
    assert sstore.schedules.add("s", cron=cron, event=EVENT).cron == cron


def test_a_stored_six_field_cron_keeps_its_meaning(
    backend: Backend, sstore: alkstore.Store, clock: Clock
) -> None:
    """Written before the rule (by hand here): read as croniter reads it, seconds last; an
    update of another field keeps it, an update to a new bare six-field one is refused."""
    sstore.schedules.add("old", cron="* * * * *", event=EVENT, catch_up="all")
    legacy = "* * * * * */20"
    schedule_rows.execute(backend, "UPDATE {schedules} SET cron = ? WHERE name = 'old'", legacy)
    assert sstore.schedules.update("old", key="k").cron == legacy
    assert sstore.schedules.get("old", upcoming=3).next_fires == [
        T0 + timedelta(seconds=s) for s in (0, 20, 40)
    ]
    clock.advance(40)
    assert sstore.fire_schedules() == 3
    with pytest.raises(alkstore.InvalidArgument, match="six-field"):
        sstore.schedules.update("old", cron="* * * * * */30")
    assert sstore.schedules.get("old").cron == legacy
