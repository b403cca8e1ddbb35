"""Schedule boundary maths, pure (no database): next_after, latest_at_or_before, plan,
parse_every. Cron expressions name wall-clock times in `tz`: a time inside a skipped
(spring-forward) hour fires once at the end of the gap, a wall-clock time repeated by
a fall-back fires once. `every` is absolute time from start_at. Times are epoch ms.

The DST dates used: Europe/Berlin springs forward on 2026-03-29 (02:00 CET -> 03:00
CEST) and falls back on 2026-10-25 (03:00 CEST -> 02:00 CET).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

import alkstore
from alkstore._cron import check_cron
from alkstore._schedules import (
    MAX_CATCH_UP,
    ON_TIME_MS,
    CatchUp,
    Schedule,
    check_tz,
    latest_at_or_before,
    next_after,
    parse_every,
    plan,
)

BERLIN = "Europe/Berlin"
SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def ms(iso: str) -> int:
    """Epoch ms of an ISO time with an offset (whole seconds: exact)."""
    when = datetime.fromisoformat(iso)
    assert when.tzinfo is not None, iso
    return int(when.timestamp()) * 1000 + when.microsecond // 1000


def local(value: int | None, tz: str = BERLIN) -> str | None:
    """An epoch-ms boundary as ISO wall-clock time in `tz` (with its offset)."""
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, UTC).astimezone(ZoneInfo(tz)).isoformat()


def chain(cron: str, tz: str, after: str, count: int, start_at: int = 0) -> list[str | None]:
    """The next `count` cron boundaries after `after`, as local ISO times."""
    out: list[str | None] = []
    b = ms(after)
    for _ in range(count):
        b = next_after(cron, None, tz, start_at, b)
        out.append(local(b, tz))
    return out


def back_chain(cron: str, tz: str, before: str, count: int) -> list[str | None]:
    """Walk latest_at_or_before backwards from `before` (exclusive), as local ISO times."""
    out: list[str | None] = []
    b: int | None = ms(before)
    for _ in range(count):
        assert b is not None
        b = latest_at_or_before(cron, None, tz, 0, b - 1)
        out.append(local(b, tz))
    return out


def schedule(
    *,
    next_fire_at: int,
    cron: str | None = None,
    every_ms: int | None = None,
    tz: str = "UTC",
    catch_up: CatchUp = "latest",
    start_at: int = 0,
) -> Schedule:
    return Schedule(
        name="s",
        cron=cron,
        every_ms=every_ms,
        tz=tz,
        catch_up=catch_up,
        start_at=start_at,
        event_type="test.order_placed",
        payload="{}",
        key=None,
        paused=False,
        next_fire_at=next_fire_at,
        last_fired=None,
    )


# -- cron through daylight saving time ------------------------------------------------------


def test_daily_time_in_the_spring_forward_gap_fires_once_at_the_end_of_the_gap() -> None:
    # 02:30 does not exist on 2026-03-29 in Berlin: it fires at 03:00 CEST instead.
    assert chain("30 2 * * *", BERLIN, "2026-03-27T12:00:00+01:00", 4) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    # and exactly once: 03:00 is 01:00 UTC, one hour after 02:30 CET of the day before + 23 h
    gap_day = ms("2026-03-29T03:00:00+02:00")
    assert gap_day == ms("2026-03-29T01:00:00+00:00")
    assert next_after("30 2 * * *", None, BERLIN, 0, gap_day - 1) == gap_day
    assert next_after("30 2 * * *", None, BERLIN, 0, gap_day) == ms("2026-03-30T02:30:00+02:00")


@pytest.mark.parametrize("minute_hour", ["0 2", "15 2", "59 2"])
def test_every_time_inside_the_skipped_hour_maps_to_the_end_of_the_gap(minute_hour: str) -> None:
    cron = f"{minute_hour} * * *"
    assert chain(cron, BERLIN, "2026-03-29T00:00:00+01:00", 2) == [
        "2026-03-29T03:00:00+02:00",
        f"2026-03-30T02:{minute_hour.split()[0].zfill(2)}:00+02:00",
    ]


def test_latest_at_or_before_agrees_with_next_after_around_the_spring_gap() -> None:
    cron = "30 2 * * *"
    gap_end = ms("2026-03-29T03:00:00+02:00")
    assert latest_at_or_before(cron, None, BERLIN, 0, gap_end) == gap_end
    assert local(latest_at_or_before(cron, None, BERLIN, 0, gap_end - 1)) == (
        "2026-03-28T02:30:00+01:00"
    )
    assert latest_at_or_before(cron, None, BERLIN, 0, ms("2026-03-29T12:00:00+02:00")) == gap_end
    assert back_chain(cron, BERLIN, "2026-03-30T12:00:00+02:00", 3) == [
        "2026-03-30T02:30:00+02:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-28T02:30:00+01:00",
    ]


def test_half_hourly_through_spring_forward() -> None:
    # 02:00 and 02:30 do not exist: both land on 03:00, which fires once.
    assert chain("*/30 * * * *", BERLIN, "2026-03-29T01:00:00+01:00", 4) == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]
    assert back_chain("*/30 * * * *", BERLIN, "2026-03-29T04:00:00+02:00", 4) == [
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T01:00:00+01:00",
    ]


def test_daily_time_repeated_by_the_fall_back_fires_once() -> None:
    # 02:30 happens twice on 2026-10-25 (CEST, then CET): only the first fires.
    assert chain("30 2 * * *", BERLIN, "2026-10-24T12:00:00+02:00", 3) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00",
    ]
    first = ms("2026-10-25T02:30:00+02:00")
    assert next_after("30 2 * * *", None, BERLIN, 0, first - 1) == first
    # after the first 02:30, the next boundary is the next day's
    for after in ["2026-10-25T02:30:00+02:00", "2026-10-25T02:59:59+02:00"]:
        assert local(next_after("30 2 * * *", None, BERLIN, 0, ms(after))) == (
            "2026-10-26T02:30:00+01:00"
        )


def test_next_after_from_inside_the_repeated_hour_skips_the_repeated_time() -> None:
    got = next_after("30 2 * * *", None, BERLIN, 0, ms("2026-10-25T02:10:00+01:00"))
    assert local(got) == "2026-10-26T02:30:00+01:00"


def test_outage_across_the_fall_back_fires_a_repeated_time_once() -> None:
    """The runner is down from 02:20 CEST to 02:10 CET (50 minutes) on 2026-10-25."""
    s = schedule(cron="30 2 * * *", tz=BERLIN, next_fire_at=ms("2026-10-25T02:30:00+02:00"))
    fired: list[str | None] = []
    for now in ["2026-10-25T02:10:00+01:00", "2026-10-25T02:31:00+01:00"]:
        due, upcoming, _ = plan(s, ms(now))
        fired += [local(b) for b in due]
        if due:
            s = schedule(cron=s.cron, tz=BERLIN, next_fire_at=upcoming)
    assert fired == ["2026-10-25T02:30:00+02:00"]


def test_half_hourly_through_fall_back_skips_the_repeated_wall_times() -> None:
    assert chain("*/30 * * * *", BERLIN, "2026-10-25T01:00:00+02:00", 6) == [
        "2026-10-25T01:30:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        # 02:00 and 02:30 CET repeat wall times that already fired
        "2026-10-25T03:00:00+01:00",
        "2026-10-25T03:30:00+01:00",
        "2026-10-25T04:00:00+01:00",
    ]


def test_fall_back_in_another_zone() -> None:
    # New York falls back on 2026-11-01 (02:00 EDT -> 01:00 EST): 01:30 fires once.
    assert chain("30 1 * * *", "America/New_York", "2026-10-31T12:00:00-04:00", 2) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]
    # and springs forward on 2026-03-08: 02:30 fires at 03:00 EDT
    assert chain("30 2 * * *", "America/New_York", "2026-03-07T12:00:00-05:00", 2) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]


def test_latest_at_or_before_skips_repeated_wall_times_like_next_after() -> None:
    assert back_chain("30 2 * * *", BERLIN, "2026-10-26T00:00:00+01:00", 2) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-24T02:30:00+02:00",
    ]


def test_catch_up_all_across_the_fall_back_fires_a_repeated_time_once() -> None:
    cron = "30 2 * * *"
    s = schedule(cron=cron, tz=BERLIN, catch_up="all", next_fire_at=ms("2026-10-24T02:30:00+02:00"))
    due, _upcoming, skipped = plan(s, ms("2026-10-25T12:00:00+01:00"))
    assert [local(b) for b in due] == ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00"]
    assert skipped == 0


def test_catch_up_all_half_hourly_across_the_fall_back_matches_a_live_runner() -> None:
    cron = "*/30 * * * *"
    s = schedule(cron=cron, tz=BERLIN, catch_up="all", next_fire_at=ms("2026-10-25T01:30:00+02:00"))
    due, _upcoming, _skipped = plan(s, ms("2026-10-25T03:45:00+01:00"))
    live = chain(cron, BERLIN, "2026-10-25T01:29:00+02:00", 5)  # 01:30 CEST .. 03:30 CET
    assert [local(b) for b in due] == live


def test_boundaries_and_latest_agree_over_a_year_outside_the_fall_back() -> None:
    """For every boundary b: latest_at_or_before(b) == b and the one before b - 1 is the
    previous boundary; over 2026 in Berlin, except around the repeated fall-back hour."""
    repeated = (ms("2026-10-25T00:00:00+00:00"), ms("2026-10-25T02:00:00+00:00"))
    for cron in ["30 2 * * *", "0 */6 * * *", "15 9 * * 1-5", "0 0 L * *"]:
        b = ms("2026-01-01T00:00:00+01:00")
        previous: int | None = None
        while b < ms("2027-01-01T00:00:00+01:00"):
            b = next_after(cron, None, BERLIN, 0, b)
            if repeated[0] <= b <= repeated[1] + DAY:
                previous = None
                continue
            assert latest_at_or_before(cron, None, BERLIN, 0, b) == b, (cron, local(b))
            if previous is not None:
                got = latest_at_or_before(cron, None, BERLIN, 0, b - 1)
                assert got == previous, (cron, local(b), local(got))
            previous = b


# -- month ends and odd dates ---------------------------------------------------------------


def test_the_31st_skips_short_months() -> None:
    assert chain("0 0 31 * *", "UTC", "2026-01-01T00:00:00+00:00", 7) == [
        "2026-01-31T00:00:00+00:00",
        "2026-03-31T00:00:00+00:00",
        "2026-05-31T00:00:00+00:00",
        "2026-07-31T00:00:00+00:00",
        "2026-08-31T00:00:00+00:00",
        "2026-10-31T00:00:00+00:00",
        "2026-12-31T00:00:00+00:00",
    ]
    got = latest_at_or_before("0 0 31 * *", None, "UTC", 0, ms("2026-05-15T00:00:00+00:00"))
    assert local(got, "UTC") == "2026-03-31T00:00:00+00:00"


def test_last_day_of_the_month() -> None:
    check_cron("0 0 L * *")  # croniter supports L in the day-of-month field
    assert chain("0 0 L * *", "UTC", "2026-01-01T00:00:00+00:00", 4) == [
        "2026-01-31T00:00:00+00:00",
        "2026-02-28T00:00:00+00:00",
        "2026-03-31T00:00:00+00:00",
        "2026-04-30T00:00:00+00:00",
    ]
    assert chain("0 0 L 2 *", "UTC", "2027-03-01T00:00:00+00:00", 2) == [
        "2028-02-29T00:00:00+00:00",
        "2029-02-28T00:00:00+00:00",
    ]


def test_leap_day() -> None:
    assert chain("0 12 29 2 *", "UTC", "2026-01-01T00:00:00+00:00", 2) == [
        "2028-02-29T12:00:00+00:00",
        "2032-02-29T12:00:00+00:00",
    ]


def test_month_end_in_local_time() -> None:
    # midnight on the 31st in Berlin is the 30th in UTC
    got = next_after("0 0 31 * *", None, BERLIN, 0, ms("2026-07-01T00:00:00+02:00"))
    assert local(got) == "2026-07-31T00:00:00+02:00"
    assert local(got, "UTC") == "2026-07-30T22:00:00+00:00"


# -- every ------------------------------------------------------------------------------------


def test_every_is_absolute_time_from_start_at() -> None:
    start = ms("2026-03-29T00:10:00+00:00")
    every = 7 * SECOND
    assert next_after(None, every, BERLIN, start, start - 10 * DAY) == start
    assert next_after(None, every, BERLIN, start, start - 1) == start
    assert next_after(None, every, BERLIN, start, start) == start + every
    assert next_after(None, every, BERLIN, start, start + every - 1) == start + every
    assert next_after(None, every, BERLIN, start, start + 100 * every + 3) == start + 101 * every
    assert latest_at_or_before(None, every, BERLIN, start, start - 1) is None
    assert latest_at_or_before(None, every, BERLIN, start, start) == start
    assert latest_at_or_before(None, every, BERLIN, start, start + every - 1) == start
    assert latest_at_or_before(None, every, BERLIN, start, start + 5 * every) == start + 5 * every


def test_every_ignores_daylight_saving_time() -> None:
    # hourly from midnight: the 02:00-03:00 jump changes the wall clock, not the spacing
    start = ms("2026-03-29T00:00:00+01:00")
    b, got = start - 1, []
    for _ in range(4):
        b = next_after(None, HOUR, BERLIN, start, b)
        got.append(local(b))
    assert got == [
        "2026-03-29T00:00:00+01:00",
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]
    assert all(b - a == HOUR for a, b in pairwise(ms(t) for t in got if t is not None))


def test_cron_respects_start_at() -> None:
    start = ms("2026-06-10T12:00:00+00:00")
    assert latest_at_or_before("0 0 * * *", None, "UTC", start, start + HOUR) is None
    assert local(next_after("0 0 * * *", None, "UTC", start, start - 1), "UTC") == (
        "2026-06-11T00:00:00+00:00"
    )
    assert local(latest_at_or_before("0 0 * * *", None, "UTC", start, start + DAY), "UTC") == (
        "2026-06-11T00:00:00+00:00"
    )


def test_cron_with_a_seconds_field() -> None:
    # croniter's sixth field is seconds
    got = chain("* * * * * */20", "UTC", "2026-01-01T00:00:00+00:00", 3)
    assert got == [
        "2026-01-01T00:00:20+00:00",
        "2026-01-01T00:00:40+00:00",
        "2026-01-01T00:01:00+00:00",
    ]


# -- plan: catch-up policies -------------------------------------------------------------------

START = ms("2026-01-05T00:00:00+00:00")
PERIOD = 10 * SECOND


def every_plan(catch_up: CatchUp, missed: int, late: int = 0) -> tuple[list[int], int, int]:
    """Plan at `late` ms after the boundary `missed` periods past next_fire_at = START."""
    s = schedule(every_ms=PERIOD, start_at=START, next_fire_at=START, catch_up=catch_up)
    return plan(s, START + missed * PERIOD + late)


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
def test_nothing_due_before_the_next_boundary(catch_up: CatchUp) -> None:
    s = schedule(every_ms=PERIOD, start_at=START, next_fire_at=START, catch_up=catch_up)
    assert plan(s, START - 1) == ([], START, 0)
    # before start_at entirely
    assert plan(s, START - 10 * DAY) == ([], START, 0)


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
def test_on_time_boundary_fires_under_every_policy(catch_up: CatchUp) -> None:
    assert every_plan(catch_up, 0) == ([START], START + PERIOD, 0)
    assert every_plan(catch_up, 0, late=1_000) == ([START], START + PERIOD, 0)


def test_latest_fires_the_most_recent_missed_boundary_once() -> None:
    due, upcoming, skipped = every_plan("latest", 5, late=3_000)
    assert due == [START + 5 * PERIOD]
    assert upcoming == START + 6 * PERIOD
    assert skipped == 1


def test_all_fires_every_missed_boundary_in_order() -> None:
    due, upcoming, skipped = every_plan("all", 5, late=3_000)
    assert due == [START + k * PERIOD for k in range(6)]
    assert upcoming == START + 6 * PERIOD
    assert skipped == 0


def test_all_is_bounded_by_max_catch_up_keeping_the_most_recent() -> None:
    assert MAX_CATCH_UP == 100
    due, _, skipped = every_plan("all", MAX_CATCH_UP - 1)  # exactly 100 due
    assert due == [START + k * PERIOD for k in range(MAX_CATCH_UP)] and skipped == 0
    due, upcoming, skipped = every_plan("all", MAX_CATCH_UP)  # 101 due
    assert due == [START + k * PERIOD for k in range(1, MAX_CATCH_UP + 1)]
    assert upcoming == START + (MAX_CATCH_UP + 1) * PERIOD
    assert skipped == -1
    due, _, skipped = every_plan("all", 1_000, late=1)
    assert len(due) == MAX_CATCH_UP and skipped == -1
    assert due[0] == START + 901 * PERIOD and due[-1] == START + 1_000 * PERIOD


def test_all_catches_up_cron_boundaries_across_the_spring_gap() -> None:
    s = schedule(
        cron="30 2 * * *", tz=BERLIN, catch_up="all", next_fire_at=ms("2026-03-28T02:30:00+01:00")
    )
    due, upcoming, skipped = plan(s, ms("2026-03-31T09:00:00+02:00"))
    assert [local(b) for b in due] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    assert local(upcoming) == "2026-04-01T02:30:00+02:00" and skipped == 0


def test_none_fires_only_an_on_time_boundary() -> None:
    # every 10 s: "on time" is half a period, 5 s
    assert every_plan("none", 3, late=5_000) == ([START + 3 * PERIOD], START + 4 * PERIOD, 1)
    assert every_plan("none", 3, late=5_001) == ([], START + 4 * PERIOD, 1)
    assert every_plan("none", 0, late=5_001) == ([], START + PERIOD, 1)
    assert every_plan("none", 0, late=4_999) == ([START], START + PERIOD, 0)


def test_none_on_time_window_is_at_most_a_minute() -> None:
    s = schedule(cron="0 * * * *", catch_up="none", next_fire_at=START)
    boundary = START + 2 * HOUR
    assert ON_TIME_MS == MINUTE
    assert plan(s, boundary + MINUTE) == ([boundary], boundary + HOUR, 1)
    assert plan(s, boundary + MINUTE + 1) == ([], boundary + HOUR, 1)


def test_none_with_a_tiny_interval() -> None:
    s = schedule(every_ms=1, start_at=START, next_fire_at=START, catch_up="none")
    assert plan(s, START) == ([START], START + 1, 0)
    # the window is at least 1 ms
    assert plan(s, START + 10) == ([START + 10], START + 11, 1)


def test_plan_counts_from_next_fire_at_not_start_at() -> None:
    """A boundary before next_fire_at (already fired, or skipped by a resume) never fires."""
    s = schedule(every_ms=PERIOD, start_at=START, next_fire_at=START + 3 * PERIOD, catch_up="all")
    due, _, _ = plan(s, START + 4 * PERIOD)
    assert due == [START + 3 * PERIOD, START + 4 * PERIOD]


# -- parsing and checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", 30 * SECOND),
        ("5m", 5 * MINUTE),
        ("1h", HOUR),
        ("1h30m", 90 * MINUTE),
        ("1h 30m", 90 * MINUTE),
        ("250ms", 250),
        ("1d", DAY),
        ("1.5h", 90 * MINUTE),
        ("0.2s", 200),
        ("2m30s", 150 * SECOND),
        (30, 30 * SECOND),
        (0.25, 250),
        (1.5, 1_500),
    ],
)
def test_parse_every_formats(text: str | float, expected: int) -> None:
    assert parse_every(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "30", "30S", "-5s", "5m30", "1w", "s", "30 s", "ten seconds", "0s", "0ms", "0.0001s"],
)
def test_parse_every_rejects_malformed_and_non_positive_text(text: str) -> None:
    with pytest.raises(alkstore.InvalidArgument):
        parse_every(text)


@pytest.mark.parametrize("value", [0, -1, -0.5, float("nan"), float("inf"), True, None, [30]])
def test_parse_every_rejects_bad_numbers(value: object) -> None:
    with pytest.raises(alkstore.InvalidArgument):
        parse_every(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["1.001s", 1.001, "1.023s"])
def test_parse_every_keeps_millisecond_precision(value: str | float) -> None:
    expected = 1_023 if value == "1.023s" else 1_001
    assert parse_every(value) == expected


@pytest.mark.parametrize(
    "cron", ["", "abc", "61 * * * *", "0 25 * * *", "0 0 32 * *", "* * *", "@reboot"]
)
def test_check_cron_rejects_invalid_expressions(cron: str) -> None:
    with pytest.raises(alkstore.InvalidArgument, match="invalid cron"):
        check_cron(cron)


@pytest.mark.parametrize("cron", ["0 3 * * *", "*/5 * * * *", "0 9 * * 1-5", "@daily", "0 0 L * *"])
def test_check_cron_accepts_valid_expressions(cron: str) -> None:
    assert check_cron(cron) == cron


def test_check_tz() -> None:
    assert check_tz(BERLIN) == ZoneInfo(BERLIN)
    for bad in ["Mars/Olympus_Mons", "", "../etc/passwd", "Europe/"]:
        with pytest.raises(alkstore.InvalidArgument, match="unknown time zone"):
            check_tz(bad)


def test_next_fires_of_a_long_chain_are_strictly_increasing() -> None:
    b = ms("2026-01-01T00:00:00+01:00")
    seen = []
    for _ in range(5_000):  # ~104 days of half hours, across the spring gap
        b = next_after("*/30 * * * *", None, BERLIN, 0, b)
        seen.append(b)
    assert all(a < b for a, b in pairwise(seen))
    assert timedelta(milliseconds=seen[-1] - seen[0]) > timedelta(days=100)
