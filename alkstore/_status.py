"""`store.status()`: what an operator asks first, in one typed value
(docs/adr/0018-live-workers-status-retention.md).

The log head and the sequencing backlog (ADR 0004), each subscription's lag, every
queue with its counts per state, the schedules and their next fire, who leads
(relay, scheduler, sweeper), the workers, and the retention policy in effect. Every
field is data; printing is the CLI's. Its JSON form (`msgspec.json.encode(status)`,
`alkstore status --json`) keeps these field names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from alkstore import _maintenance, _queue, _routing, _schedules, _workers

SWEEPER_ACTIVE = 60.0  # seconds: a sweep this recent means maintenance runs


class Lag(msgspec.Struct, frozen=True):
    """How far a subscription is behind the log head."""

    queue: str
    checkpoint: int
    events: int
    seconds: float | None  # age of the oldest event not yet relayed (None: caught up)
    gap: _routing.Gap | None = None  # positions it asked for that retention had pruned
    # (never had; docs/adr/0020)
    sink: str | None = None  # a broker sink's URL (None: a queue subscription; ADR 0026)
    parked: str | None = None  # why the relay stopped feeding the sink (None: it runs)


class Holdup(msgspec.Struct, frozen=True):
    """An open writing transaction (PostgreSQL): its events appear when it commits."""

    pid: int
    age: float
    state: str
    query: str


class QueueStatus(msgspec.Struct, frozen=True):
    """One queue's jobs by state (as `Queue.stats()` counts them; `running` is its
    `active`: leased jobs), the age in seconds of its oldest ready job, whether it is
    paused, and its own dead-letter retention in seconds (None: the policy's)."""

    name: str
    ready: int
    scheduled: int
    running: int
    dead: int
    oldest_ready_age: float | None
    paused: bool
    dead_retention: float | None


class ScheduleStatus(msgspec.Struct, frozen=True):
    """A schedule and its next fire time (None while paused)."""

    name: str
    cron: str | None
    every: float | None  # seconds, for an interval schedule
    tz: str
    event_type: str
    paused: bool
    next_fire: datetime | None


class Leader(msgspec.Struct, frozen=True):
    """Who leads a role. relay and scheduler: the holder of the lease of that name
    (`host:pid:tag`; the last one once it expired), `active` while it is unexpired,
    `expires_in` seconds (None when not active). sweeper: any
    relay or worker may sweep, one at a time; `holder` is the one that swept last
    (`host:pid`), `active` if that was within SWEEPER_ACTIVE seconds, `ago` seconds."""

    role: Literal["relay", "scheduler", "sweeper"]
    holder: str | None
    active: bool
    expires_in: float | None = None
    ago: float | None = None


class RetentionStatus(msgspec.Struct, frozen=True):
    """The retention in effect, in seconds (None: kept forever): the policy the last
    sweep applied (`source` "sweep", by `swept_by`), or the shipped defaults when no
    sweep has run yet (`source` "default"). Queues with their own `dead_retention`
    (QueueStatus) override `dead_letters`."""

    dead_letters: float | None
    log: float | None
    source: Literal["sweep", "default"]
    swept_by: str | None = None


class Status(msgspec.Struct, frozen=True):
    """The log head, each subscription's lag, open writing transactions (PostgreSQL), the
    sequencing backlog of ADR 0004 (PostgreSQL; 0 and None on SQLite), every queue,
    schedule, leader and worker, and the retention in effect."""

    head: int
    subscriptions: list[Lag]
    holdups: list[Holdup]
    unsequenced: int = 0  # committed events no reader had numbered yet when status looked
    oldest_appender: Holdup | None = None  # the oldest open transaction holding appended,
    # uncommitted events of this namespace (they are numbered when it commits)
    queues: list[QueueStatus] = []
    schedules: list[ScheduleStatus] = []
    leaders: list[Leader] = []
    workers: list[_workers.WorkerInfo] = []
    retention: RetentionStatus | None = None
    oldest_retained: int | None = None  # the oldest position in the log (None: no event);
    # retention pruned every position before it (docs/adr/0020)
    hidden_holdups: int = 0  # open writing transactions of other roles whose details this
    # role may not see (PostgreSQL, without pg_read_all_stats: docs/adr/0020)


def status(rt: _queue.Runtime, *, queues: bool = True) -> Status:
    engine = rt.engine
    unsequenced, appender = engine.backlog()  # before head(), which numbers the backlog
    head = engine.head()
    now = rt.now_ms()
    lags = []
    for queue, checkpoint, behind, oldest, sink, parked in engine.run("lag", {}):
        age = None
        if oldest is not None:
            oldest_ms = oldest if isinstance(oldest, int) else int(oldest.timestamp() * 1000)
            age = max(0.0, (now - oldest_ms) / 1000)
        lags.append(Lag(queue, int(checkpoint), int(behind), age, sink=sink, parked=parked))
    gaps = {sub.queue: sub.gap for sub in _routing.subscriptions(rt) if sub.gap is not None}
    if gaps:
        lags = [msgspec.structs.replace(lag, gap=gaps.get(lag.queue)) for lag in lags]
    holdups = [Holdup(*row) for row in engine.holdups()]
    oldest = None if appender is None else Holdup(*appender)
    rows = engine.run("oldest_position", {})
    retained = None if not rows or rows[0][0] is None else int(rows[0][0])
    leaders, retention = _leaders(rt)
    return Status(
        head,
        lags,
        holdups,
        unsequenced,
        oldest,
        queues=queue_counts(rt) if queues else [],
        schedules=[_schedule(s) for s in _schedules.Schedules(rt).list()],
        leaders=leaders,
        workers=_workers.workers(rt),
        retention=retention,
        oldest_retained=retained,
        hidden_holdups=engine.hidden_holdups(),
    )


def queue_counts(rt: _queue.Runtime) -> list[QueueStatus]:
    """Every queue of the namespace, in byte order of names, with its counts."""
    found = []
    params = {"now": rt.now_param()}
    for name, ready, scheduled, running, dead, oldest, paused, retention_ms in rt.engine.run(
        "status_queues", params
    ):
        found.append(
            QueueStatus(
                name,
                int(ready),
                int(scheduled),
                int(running),
                int(dead),
                None if oldest is None else max(0.0, int(oldest) / 1000),
                bool(paused),
                None if retention_ms is None else int(retention_ms) / 1000,
            )
        )
    return found


def _schedule(s: _schedules.Schedule) -> ScheduleStatus:
    every = None if s.every_ms is None else s.every_ms / 1000
    fire = None if s.paused else s.next_fire_time
    return ScheduleStatus(s.name, s.cron, every, s.tz, s.event_type, s.paused, fire)


def _lease(role: Literal["relay", "scheduler"], row: tuple[Any, ...] | None) -> Leader:
    """A lease's holder: the last one stays named after its lease expired (inactive)."""
    if row is None:
        return Leader(role, None, False)
    _, holder, _, expires_at, now = row
    left = (int(expires_at) - int(now)) / 1000
    return Leader(role, holder, left > 0, left if left > 0 else None)


def _leaders(rt: _queue.Runtime) -> tuple[list[Leader], RetentionStatus]:
    rows = {row[0]: row for row in rt.engine.run("status_locks", {"now": rt.now_param()})}
    leaders = [_lease("relay", rows.get("relay")), _lease("scheduler", rows.get("scheduler"))]
    stamp = rows.get(_maintenance.STAMP)
    applied = None
    if stamp is not None:
        _, holder, _, at, now = stamp
        applied = _maintenance.last_sweep(holder, int(at), int(now))
    if applied is None:
        leaders.append(Leader("sweeper", None, False))
        policy = _maintenance.Retention()
        retention = RetentionStatus(policy.dead_letters, policy.log, "default")
    else:
        active = applied.ago < SWEEPER_ACTIVE
        leaders.append(Leader("sweeper", applied.by, active, ago=applied.ago))
        policy = applied.retention
        retention = RetentionStatus(policy.dead_letters, policy.log, "sweep", applied.by)
    return leaders, retention
