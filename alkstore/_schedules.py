"""First-class schedules: cron or fixed intervals that append an event at each boundary.

Boundary maths is pure (time passed in, epoch milliseconds); croniter does cron
(`_cron` says which expressions a schedule takes), zoneinfo does time zones.
Firing (`_firing.tick`) is an append to the log, once per boundary whatever
number of runners tick. See docs/adr/0009-scheduler.md.
"""

from __future__ import annotations

import builtins
import re
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from alkstore import _checks, _config, _cron, _engine, _errors, _events, _jobs, _queue

CatchUp = Literal["latest", "all", "none"]
MAX_CATCH_UP = 100  # catch_up="all" fires at most this many missed boundaries per tick
ON_TIME_MS = 60_000  # catch_up="none": a boundary this recent (or half a period) still fires
# The shortest interval a schedule takes (every=; a cron expression's finest field is
# the second). A tick fires at most one boundary per schedule under catch_up="latest" and
# the runner ticks about once a second: shorter intervals only skip boundaries and log
# it, or under "all" append up to MAX_CATCH_UP events per tick. ADR 0009.
MIN_EVERY_MS = 1_000
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_EVERY = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d)\s*)+")  # "1h 30m", not "30 s"
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule as stored; `next_fires` is filled in by `get()`."""

    name: str
    cron: str | None
    every_ms: int | None
    tz: str
    catch_up: CatchUp
    start_at: int
    event_type: str
    payload: str
    key: str | None
    paused: bool
    next_fire_at: int
    last_fired: int | None
    next_fires: list[datetime] = []

    @property
    def next_fire_time(self) -> datetime:
        return _jobs.from_ms(self.next_fire_at)


def parse_every(every: str | float) -> int:
    """ "30s", "5m", "1h30m", "250ms", "1d", or seconds as a number -> milliseconds (> 0)."""
    if isinstance(every, int | float) and not isinstance(every, bool):
        ms = round(_checks.seconds("every", every, positive=True) * 1000)
    elif isinstance(every, str) and _EVERY.fullmatch(text := every.strip()):
        parts = _DURATION.findall(text)
        units = [unit for _, unit in parts]
        if len(set(units)) != len(units):
            raise _errors.InvalidArgument(f"every repeats a unit: {every!r}")
        ms = round(sum(float(n) * _UNIT_MS[u] for n, u in parts))
    else:
        raise _errors.InvalidArgument(f'every must look like "30s", "5m", "1h", got {every!r}')
    if ms <= 0:
        raise _errors.InvalidArgument(f"every must be a positive interval, got {every!r}")
    return ms


def check_every(every: str | float) -> int:
    """parse_every, refusing intervals shorter than MIN_EVERY_MS."""
    ms = parse_every(every)
    if ms < MIN_EVERY_MS:
        raise _errors.InvalidArgument(
            f"every must be at least {MIN_EVERY_MS // 1000}s (a schedule fires at most once "
            f"a second), got {every!r}"
        )
    return ms


def check_tz(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise _errors.InvalidArgument(f"unknown time zone {tz!r}") from exc


def _repeated(moment: datetime, zone: ZoneInfo) -> bool:
    """True for the second occurrence of a wall-clock time repeated by a fall-back."""
    first = moment.replace(tzinfo=None).replace(tzinfo=zone, fold=0)
    return first.timestamp() != moment.timestamp()


def next_after(cron: str | None, every_ms: int | None, tz: str, start_at: int, after: int) -> int:
    """The first boundary strictly after `after` (epoch ms).

    cron: wall-clock times in `tz`. A time inside a skipped (spring-forward) hour fires
    at the end of the gap; a wall-clock time repeated by a fall-back fires once.
    every: start_at + k * every, in absolute time.
    """
    if every_ms is not None:
        if after < start_at:
            return start_at
        return start_at + ((after - start_at) // every_ms + 1) * every_ms
    assert cron is not None
    zone = ZoneInfo(tz)
    it = _cron.iterator(cron, datetime.fromtimestamp(after / 1000, UTC).astimezone(zone))
    while True:
        candidate: datetime = it.get_next(datetime)
        value = round(candidate.timestamp() * 1000)
        if value > after and not _repeated(candidate, zone):  # a repeated time fires once
            return value


def latest_at_or_before(
    cron: str | None, every_ms: int | None, tz: str, start_at: int, now: int
) -> int | None:
    """The last boundary <= now (None before the first one)."""
    if every_ms is not None:
        if now < start_at:
            return None
        return start_at + ((now - start_at) // every_ms) * every_ms
    assert cron is not None
    zone = ZoneInfo(tz)
    it = _cron.iterator(cron, datetime.fromtimestamp((now + 1) / 1000, UTC).astimezone(zone))
    while True:
        candidate: datetime = it.get_prev(datetime)
        value = round(candidate.timestamp() * 1000)
        if value < start_at:
            return None
        if value <= now and not _repeated(candidate, zone):
            return value


def plan(schedule: Schedule, now: int) -> tuple[list[int], int, int]:
    """(boundaries to fire, the next boundary after now, missed boundaries skipped; -1 means
    more than MAX_CATCH_UP were missed and only the most recent ones fire)."""
    spec = (schedule.cron, schedule.every_ms, schedule.tz, schedule.start_at)
    first = schedule.next_fire_at
    upcoming = next_after(*spec, now)
    latest = latest_at_or_before(*spec, now)
    if latest is None or latest < first:
        return [], upcoming, 0
    if schedule.catch_up == "all":  # newest first, back to the first missed, bounded
        due: list[int] = []
        b: int | None = latest
        while b is not None and b >= first and len(due) < MAX_CATCH_UP:
            due.append(b)
            b = latest_at_or_before(*spec, b - 1)
        more = b is not None and b >= first
        return due[::-1], upcoming, -1 if more else 0
    if schedule.catch_up == "latest":
        return [latest], upcoming, 0 if latest == first else 1
    on_time = min(ON_TIME_MS, max(1, (upcoming - latest) // 2))  # catch_up == "none"
    if now - latest <= on_time:
        return [latest], upcoming, 0 if latest == first else 1
    return [], upcoming, 1


_ROW = (
    "name cron every_ms tz catch_up start_at event_type payload key paused next_fire_at last_fired"
).split()


def schedule_from_row(row: tuple[Any, ...]) -> Schedule:
    values = dict(zip(_ROW, row, strict=True))
    values["paused"] = bool(values["paused"])
    return Schedule(**values)


class Schedules:
    """`store.schedules`: add, update, pause, resume, remove, get, list."""

    def __init__(self, runtime: _queue.Runtime) -> None:
        self._rt = runtime
        self._engine: _engine.Engine = runtime.engine

    def _params(
        self,
        name: str,
        cron: str | None,
        every_ms: int | None,
        encoded: tuple[str, str],
        key: str | None,
        tz: str,
        catch_up: CatchUp,
        start: int | None,
    ) -> dict[str, Any]:
        _config.check_name("schedule", name)
        if (cron is None) == (every_ms is None):
            raise _errors.InvalidArgument("give exactly one of cron= or every=")
        check_tz(tz)
        if catch_up not in ("latest", "all", "none"):
            raise _errors.InvalidArgument(
                f'catch_up must be "latest", "all" or "none": {catch_up!r}'
            )
        _engine.check_key(key)
        now = self._rt.now_ms()
        start = now if start is None else start
        return {
            "name": name,
            "cron": cron,
            "every_ms": every_ms,
            "tz": tz,
            "catch_up": catch_up,
            "start_at": start,
            "event_type": encoded[0],
            "payload": encoded[1],
            "key": key,
            "next_fire_at": next_after(cron, every_ms, tz, start, max(now, start) - 1),
            "now": now,
        }

    def _encode(self, event: _events.Event) -> tuple[str, str]:
        """The event as its firings append it: checked as `tx.append` checks it."""
        event_type, payload = _events.codec.encode(event)
        if _checks.size(payload) > self._rt.max_payload_bytes:
            raise _errors.PayloadTooLarge(
                _checks.size(payload), self._rt.max_payload_bytes, event_type
            )
        return event_type, payload

    @staticmethod
    def _start_ms(start_at: datetime | float | None) -> int | None:
        if start_at is None:
            return None
        if isinstance(start_at, datetime):
            if start_at.tzinfo is None:
                raise _errors.InvalidArgument("start_at must be timezone-aware")
            return round(start_at.timestamp() * 1000)
        return round(_checks.seconds("start_at", start_at) * 1000)  # epoch seconds

    def add(
        self,
        name: str,
        *,
        event: _events.Event,
        cron: str | None = None,
        every: str | float | None = None,
        key: str | None = None,
        tz: str = "UTC",
        catch_up: CatchUp = "latest",
        start_at: datetime | float | None = None,
    ) -> Schedule:
        """Add a schedule; its first boundary is the first at or after now (or start_at).

        every: at least 1 s. cron: five fields, a macro such as "@daily", or six with
        the seconds first: "@seconds-first 0 * * * * *" (a bare six-field expression
        is refused: schedulers disagree on where its seconds are)."""
        every_ms = None if every is None else check_every(every)
        if cron is not None:
            _cron.check_cron(cron)
        params = self._params(
            name, cron, every_ms, self._encode(event), key, tz, catch_up, self._start_ms(start_at)
        )
        if not self._engine.run("schedule_insert", params):
            raise _errors.InvalidArgument(f"a schedule named {name!r} already exists")
        return self.get(name)

    def update(self, name: str, **changes: Any) -> Schedule:
        """Change fields (cron/every, event, key, tz, catch_up, start_at); the next boundary
        is recomputed from now."""
        allowed = {"cron", "every", "event", "key", "tz", "catch_up", "start_at"}
        unknown = set(changes) - allowed
        if unknown:
            raise _errors.InvalidArgument(f"cannot update {sorted(unknown)}")
        current = self.get(name)
        cron, every_ms = current.cron, current.every_ms
        if "cron" in changes or "every" in changes:
            cron = changes.get("cron")
            every = changes.get("every")
            every_ms = None if every is None else check_every(every)
            if cron is not None:  # a stored one keeps its meaning (see _cron)
                _cron.check_cron(cron)
        encoded = (current.event_type, current.payload)  # no need for the event class
        if "event" in changes:
            encoded = self._encode(changes["event"])
        start: int | None = current.start_at
        if "start_at" in changes:
            start = self._start_ms(changes["start_at"])
        params = self._params(
            name,
            cron,
            every_ms,
            encoded,
            changes.get("key", current.key),
            changes.get("tz", current.tz),
            changes.get("catch_up", current.catch_up),
            start,
        )
        self._engine.run("schedule_update", params)
        return self.get(name)

    def pause(self, name: str) -> None:
        """Stop firing; boundaries passed while paused are never fired."""
        self._require(
            self._engine.run("schedule_pause", {"name": name, "now": self._rt.now_ms()}), name
        )

    def resume(self, name: str) -> None:
        """Fire again from the next boundary after now."""
        s = self.get(name)
        now = self._rt.now_ms()
        upcoming = next_after(s.cron, s.every_ms, s.tz, s.start_at, now)
        self._engine.run("schedule_resume", {"name": name, "next_fire_at": upcoming, "now": now})

    def run_now(self, name: str) -> None:
        """Append the schedule's event now, once, paused or not (its headers say
        `alkstore-schedule: name` and `alkstore-run: now`); its boundaries and next fire
        stay as they are."""
        s = self.get(name, upcoming=0)
        headers = _events.codec.encode_value({"alkstore-schedule": name, "alkstore-run": "now"})
        with self._engine.transaction() as conn:
            self._engine.insert_events(conn, [(s.event_type, s.key, headers, s.payload)])
        self._engine.committed()

    def remove(self, name: str) -> None:
        self._require(self._engine.run("schedule_remove", {"name": name}), name)

    def get(self, name: str, *, upcoming: int = 5) -> Schedule:
        """The schedule with its next `upcoming` fire times."""
        s = self._require(self._engine.run("schedule_get", {"name": name}), name)
        schedule = schedule_from_row(s[0])
        times, b = [], schedule.next_fire_at
        for _ in range(upcoming):
            times.append(_jobs.from_ms(b))
            b = next_after(schedule.cron, schedule.every_ms, schedule.tz, schedule.start_at, b)
        return msgspec.structs.replace(schedule, next_fires=times)

    def list(self) -> builtins.list[Schedule]:
        return [schedule_from_row(row) for row in self._engine.run("schedule_list", {})]

    @staticmethod
    def _require(rows: builtins.list[tuple[Any, ...]], name: str) -> builtins.list[tuple[Any, ...]]:
        if not rows:
            raise _errors.InvalidArgument(f"no schedule named {name!r}")
        return rows
