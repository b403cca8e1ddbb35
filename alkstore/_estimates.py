"""Queue counts for screens that refresh every few seconds (docs/adr/0023).

`Queue.info()` and `Store.queues()` count every live job and dead letter by its state:
exact, and a read of every row of the queue. A dashboard asks again every two seconds,
and beside a million jobs that read is the page. With `estimate=True`, once the jobs
(or the dead-letter) table holds ESTIMATE_FROM rows or more, the store counts without
reading the rows: on PostgreSQL ready, scheduled and dead are the planner's estimates;
on SQLite, which keeps no statistics, counts of the claim and dead-letter indexes alone
(unclaimable jobs the sweep has not buried yet count as ready). Either way the result
says `estimated`; running jobs (the leases index) and the age of the oldest ready job
(the claim index, per priority) stay exact. Below the threshold the counts are exact.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from alkstore import _engine

ESTIMATE_FROM = 100_000  # rows in a table (the planner's count) from which counts are estimates
FAR = 2**62  # epoch ms past any time a row holds (as _dead.FAR)


class Clock(Protocol):
    def now_param(self) -> int | None: ...

    def now_ms(self) -> int: ...


def planned(rows: list[tuple[Any, ...]]) -> int:
    """The row count of an `estimate_*` query: an EXPLAIN's "Plan Rows", or a count."""
    value = rows[0][0]
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        value = json.loads(value)
    return int(value[0]["Plan"]["Plan Rows"])


class Estimator:
    """Counts of one namespace's queues, estimated at scale (see the module's docstring).
    `active`: a table is large enough to estimate; else `Queue.info()` counts exactly."""

    def __init__(self, engine: _engine.Engine, clock: Clock, threshold: int = ESTIMATE_FROM):
        self._engine = engine
        self._now = clock.now_param()
        self._at = clock.now_ms()
        self.big_jobs = planned(engine.run("estimate_jobs", {})) >= threshold
        self.big_dead = planned(engine.run("estimate_dead", {})) >= threshold
        self.active = self.big_jobs or self.big_dead

    def counts(self, name: str, paused: bool | None = None) -> tuple[Any, ...]:
        """A row as `queue_info`'s: paused, ready, scheduled, running, dead, oldest (ms)."""
        run = self._engine.run
        params = {"queue": name, "now": self._now, "at": self._at}
        if paused is None:
            paused = bool(run("queue_paused", params)[0][0])
        running = int(run("queue_running", params)[0][0])
        oldest = run("queue_oldest_ready", params)[0][0]
        if self.big_jobs:
            waiting = max(0, planned(run("estimate_queue_jobs", params)) - running)
            ahead = planned(run("estimate_queue_scheduled", params)) - running  # leased: ahead
            scheduled = min(waiting, max(0, ahead))
            ready = waiting - scheduled
        else:
            exact = run("queue_info", params)[0]
            ready, scheduled = int(exact[1]), int(exact[2])
        if self.big_dead:
            dead = planned(run("estimate_queue_dead", params))
        else:
            span = {"queue": name, "since": -FAR, "until": FAR}
            dead = int(run("dead_count", span)[0][0])
        return paused, ready, scheduled, running, dead, oldest

    def names(self) -> list[tuple[str, bool]]:
        """Every queue's name and pause flag, in name order, without reading every job."""
        return [(name, bool(paused)) for name, paused in self._engine.run("queue_names", {})]
