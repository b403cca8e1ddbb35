"""Firing schedules: the runner's tick, once per (schedule, boundary) whatever number of
runners tick.

Two layers make a boundary fire once, in the transaction that appends its events:
the compare-and-set advance of the schedule's `next_fire_at`, and the unique
(schedule, boundary) row in the firings table. Either one alone stops the race it
is there for (tests/contract/test_schedule_once.py). See docs/adr/0009-scheduler.md.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from alkstore import _errors, _events, _jobs, _queue, _schedules

log = logging.getLogger("alkstore.scheduler")

# The clock going back by more than this since a schedule's next_fire_at was set moves it to
# the next boundary after now. A smaller step changes nothing: the boundaries in it were
# handled when the clock first passed them; and a runner whose `now` is a little older than
# another runner's advance does not take it for a clock going back.
REWIND_MS = 1_000


def rewound(schedule: _schedules.Schedule, now: int) -> int | None:
    """The first boundary at or after now (and start_at) if next_fire_at lies beyond it.

    next_fire_at was set when the clock read later than now: the clock went back since
    (a jump the database's clock made, or an injected one). Waiting for next_fire_at
    would silence the schedule until the clock caught up again; it resumes here instead.
    A boundary fired while the clock was ahead does not fire again: its (schedule,
    boundary) row is still there. None: next_fire_at is not beyond it (e.g. start_at).
    """
    spec = (schedule.cron, schedule.every_ms, schedule.tz, schedule.start_at)
    earlier = _schedules.next_after(*spec, max(now, schedule.start_at) - 1)
    return earlier if earlier < schedule.next_fire_at else None


def tick(rt: _queue.Runtime, lease: Any = None, limit: int = 100) -> int:
    """Fire every due boundary of every schedule (one transaction per schedule).

    Returns the number of events appended. Safe from any number of runners: the
    advance is a compare-and-set on next_fire_at and each (schedule, boundary) is a
    unique row, both in the transaction that appends the events; with a lease, its
    fencing token is checked there too. `now` is the database's clock (or the
    injected one): no boundary later than it fires, and schedules whose next_fire_at
    was set when the clock read later than now (it went back) resume at the next
    boundary after now.
    """
    engine = rt.engine
    now = rt.now_ms()
    fired = 0
    params = {"now": now, "limit": limit, "rewind_ms": REWIND_MS}
    for row in engine.run("schedule_due", params):
        schedule, set_at = _schedules.schedule_from_row(row[:-1]), int(row[-1])
        expected = schedule.next_fire_at
        if set_at > now + REWIND_MS and (earlier := rewound(schedule, now)) is not None:
            log.warning(
                "schedule %s: the clock went back %d ms; next boundary %s, not %s",
                schedule.name,
                set_at - now,
                _jobs.from_ms(earlier).isoformat(),
                _jobs.from_ms(expected).isoformat(),
            )
            schedule = msgspec.structs.replace(schedule, next_fire_at=earlier)
        due: list[int] = []
        upcoming, skipped = schedule.next_fire_at, 0
        if schedule.next_fire_at <= now:  # not when rewound, or only re-stamped, to the future
            due, upcoming, skipped = _schedules.plan(schedule, now)
        if skipped:
            what = f"more than {_schedules.MAX_CATCH_UP}" if skipped < 0 else str(skipped)
            log.warning(
                "schedule %s: skipped %s missed boundaries (catch_up=%s)",
                schedule.name,
                what,
                schedule.catch_up,
            )
        with engine.transaction() as conn:
            if lease is not None and not lease.renew(conn):
                raise _errors.AlkstoreError("scheduler lease lost; stopping this tick")
            advanced = engine.run_in(
                conn,
                "schedule_advance",
                {
                    "name": schedule.name,
                    "expected": expected,
                    "next_fire_at": upcoming,
                    "last_fired": due[-1] if due else None,
                    "now": now,
                },
            )
            if not advanced:
                continue  # another runner fired it, or it was changed meanwhile
            rows = []
            for boundary in due:
                if engine.run_in(
                    conn,
                    "schedule_fired",
                    {"name": schedule.name, "boundary": boundary, "now": now},
                ):
                    headers = {
                        "alkstore-schedule": schedule.name,
                        "alkstore-boundary": _jobs.from_ms(boundary).isoformat(),
                    }
                    encoded = _events.codec.encode_value(headers)
                    rows.append((schedule.event_type, schedule.key, encoded, schedule.payload))
            if rows:
                engine.insert_events(conn, rows)
        if rows:
            engine.committed()
            fired += len(rows)
    return fired


def next_due(rt: _queue.Runtime) -> int | None:
    """Epoch ms of the earliest boundary of any active schedule."""
    value = rt.engine.run("schedule_next", {})[0][0]
    return None if value is None else int(value)


def prune_firings(rt: _queue.Runtime, older_than: float = 7 * 86_400) -> None:
    before = rt.now_ms() - int(older_than * 1000)
    rt.engine.run("schedule_prune_firings", {"before": before})
