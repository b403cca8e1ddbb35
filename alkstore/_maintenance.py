"""Maintenance, one process at a time: the sweep (docs/adr/0006) and the retention
policy it applies (docs/adr/0018-live-workers-status-retention.md).

`sweep()` dead-letters expired jobs and exhausted expired leases, then applies the
retention policy: dead letters past their queue's `dead_retention` or else the
policy's, the log's events every subscription has passed and older than the policy's
window, and the rows of workers not seen for an hour. Retention works in bounded
batches for at most RETENTION_BUDGET seconds per sweep (a process that sweeps inline,
the relay, never stalls behind a large first prune); what is left goes next time.
Each sweep that ran records who ran it and the policy it applied (`alkstore status`).
"""

from __future__ import annotations

import math
import os
import socket
import time
from typing import Any

import msgspec

from alkstore import _errors, _jobs, _queue, _workers

DAY = 86_400.0
DEFAULT_DEAD_RETENTION = 14 * DAY  # dead letters: kept two weeks unless the queue says
DEFAULT_LOG_RETENTION = 7 * DAY  # events: a week after every subscription passed them
RETENTION_BUDGET = 1.0  # seconds of retention work per sweep; the rest goes next sweep
LOG_BATCH = _queue.SWEEP_BATCH  # events per prune statement inside a sweep
STAMP = "sweep.last"  # the locks row that records the last sweep (not a lease name)

_stamp = msgspec.json.Encoder()


class Retention(msgspec.Struct, frozen=True, kw_only=True):
    """How long maintenance keeps what is finished, in seconds (None: forever).

    `dead_letters`: a dead letter's age after which the sweep deletes it, unless its
    queue has a `dead_retention` of its own (`Queue.configure`). `log`: an event's age
    after which it is deleted once every subscription has relayed it (events no
    subscription has passed are kept whatever their age)."""

    dead_letters: float | None = DEFAULT_DEAD_RETENTION
    log: float | None = DEFAULT_LOG_RETENTION

    def __post_init__(self) -> None:
        for name in ("dead_letters", "log"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise _errors.InvalidArgument(
                    f"retention {name} must be a finite number of seconds > 0, or None to "
                    f"keep forever, got {value!r}"
                )


KEEP_FOREVER = Retention(dead_letters=None, log=None)


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


def sweep(runtime: _queue.Runtime, retention: Retention) -> _jobs.SweepResult:
    """Maintenance for every queue of the namespace; one process at a time."""
    engine = runtime.engine
    now = runtime.now_param()
    with engine.sweep_lock(now) as held:
        if not held:
            return _jobs.SweepResult(ran=False)
        batch = _queue.SWEEP_BATCH
        expired = _batches(engine, "sweep_expired", {"now": now}, batch, None)
        lapsed = _batches(engine, "sweep_exhausted", {"now": now}, batch, None)
        deadline = time.monotonic() + RETENTION_BUDGET
        dead = {"now": now, "default_ms": _ms(retention.dead_letters)}
        purged = _batches(engine, "sweep_retention", dead, batch, deadline)
        pruned = 0
        if retention.log is not None:
            before = runtime.now_ms() - int(retention.log * 1000)
            log = {"before": before}
            pruned = _batches(engine, "prune_log", log, LOG_BATCH, deadline)
        forgotten = _workers.forget(runtime, now)
        holder = {
            "by": f"{socket.gethostname()}:{os.getpid()}",
            "dead_letters": retention.dead_letters,
            "log": retention.log,
        }
        engine.run("sweep_stamp", {"holder": _stamp.encode(holder).decode(), "now": now})
    return _jobs.SweepResult(True, expired, lapsed, purged, pruned, forgotten)


def _batches(
    engine: Any, name: str, params: dict[str, Any], batch: int, deadline: float | None
) -> int:
    """Run a deleting query in batches until one comes back short (or, with a deadline,
    until the time is up); the rows it touched in all."""
    total = 0
    params = {**params, "batch": batch}
    while True:
        n = len(engine.run(name, params))
        total += n
        if n < batch or (deadline is not None and time.monotonic() >= deadline):
            return total


class Applied(msgspec.Struct, frozen=True):
    """The last sweep's record: who ran it, how long ago (s), the policy it applied."""

    by: str
    ago: float
    retention: Retention


def last_sweep(holder: str, at_ms: int, now_ms: int) -> Applied | None:
    """Read the `sweep.last` row (None if it does not parse: written by someone else)."""
    try:
        fields = msgspec.json.decode(holder, type=dict[str, Any])
        policy = Retention(dead_letters=fields.get("dead_letters"), log=fields.get("log"))
        by = str(fields["by"])
    except (msgspec.DecodeError, KeyError, _errors.InvalidArgument):
        return None
    return Applied(by, max(0.0, (now_ms - at_ms) / 1000), policy)
