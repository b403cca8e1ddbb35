"""Throughput per queue, from the counts live workers write in their rows (docs/adr/0023,
addendum): the store keeps no count of jobs done (an ack deletes the job), and the ack
path writes nothing more for this.

Each worker's row says what it has done per queue since it started (`WorkerInfo.counts`:
done, retried, dead), as of its last refresh (`last_seen`, every 10 s), both written by
the worker in one statement on the store's clock. As the queue pages refresh, this
dashboard process remembers the rows it saw, and for each live worker takes what it did
between its row now and its row about WINDOW seconds earlier, over the time between the
two refreshes; the rates of the workers of a queue are summed:

- a worker that started within the window counts from its start (its counts were zero
  at `started_at`): a new worker is a rate, never a spike;
- a worker this process has seen only once, started before the window, has no rate yet
  (the queue shows "…" until its next refresh, at most 10 s after the dashboard starts);
- a counter lower than before (which a worker never writes) counts as nothing, not as a
  negative rate; a worker whose row is gone (stopped) or dead no longer counts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import msgspec

import alkstore

WINDOW = 60.0  # seconds of each worker's refreshes a rate spans (at least, once seen)
KINDS = ("done", "retried", "dead")
Point = tuple[float, dict[str, dict[str, int]]]  # (last_seen, counts) of one refresh


class Rate(msgspec.Struct, frozen=True):
    """Jobs of a queue per second over the last WINDOW: acked (`done`), retried, and
    dead-lettered, by `workers` live workers that report counts for it."""

    done: float
    retried: float
    dead: float
    workers: int


class Throughput:
    def __init__(self, window: float = WINDOW) -> None:
        self._lock = threading.Lock()
        self.window = window
        self._seen: dict[str, list[Point]] = {}  # worker id -> its refreshes, oldest first

    def update(self, workers: Iterable[alkstore.WorkerInfo]) -> dict[str, Rate | None]:
        """Remember these rows (`store.workers()`); return each queue's rate, None while
        one of its workers has none yet. A queue no live worker reports on is absent."""
        rows = [w for w in workers if w.counts is not None]
        with self._lock:
            seen: dict[str, list[Point]] = {}
            for w in rows:
                seen[w.id] = self._remember(w)
            self._seen = seen  # rows that are gone are forgotten
        sums: dict[str, list[float]] = {}
        unknown: set[str] = set()
        for w in rows:
            if not w.alive:
                continue
            assert w.counts is not None
            rates = self._rates(w, seen[w.id])
            for queue in w.counts:
                total = sums.setdefault(queue, [0.0, 0.0, 0.0, 0.0])
                total[3] += 1
                if rates is None or queue not in rates:
                    unknown.add(queue)
                    continue
                for i, value in enumerate(rates[queue]):
                    total[i] += value
        return {
            q: None if q in unknown else Rate(s[0], s[1], s[2], int(s[3]))
            for q, s in sorted(sums.items())
        }

    def _remember(self, w: alkstore.WorkerInfo) -> list[Point]:
        """The worker's refreshes: this one added (or, at the same time as the last one,
        instead of it), and of those at least WINDOW older than it only the newest kept."""
        assert w.counts is not None
        at = w.last_seen.timestamp()
        points = list(self._seen.get(w.id, ()))
        if points and at == points[-1][0]:
            points[-1] = (at, w.counts)
        elif not points or at > points[-1][0]:
            points.append((at, w.counts))
        cut = points[-1][0] - self.window
        older = [i for i, (t, _) in enumerate(points) if t <= cut]
        return points[older[-1] :] if older else points

    def _rates(self, w: alkstore.WorkerInfo, points: list[Point]) -> dict[str, list[float]] | None:
        """Per queue, the worker's done, retried and dead per second; None: not known yet."""
        at, now = points[-1]
        start = w.started_at.timestamp()
        before: dict[str, dict[str, int]]
        if start >= at - self.window:  # young: its whole life, from zero at its start
            since, before = start, {}
        elif points[0][0] < at:
            since, before = points[0]
        else:
            return None  # seen once, running since before the window
        span = at - since
        rates: dict[str, list[float]] = {}
        for queue, counts in now.items():
            was = before.get(queue, {})
            rates[queue] = [
                max(0, counts.get(k, 0) - was.get(k, 0)) / span if span > 0 else 0.0 for k in KINDS
            ]
        return rates


def shown(value: float) -> str:
    """A rate as people read it: per second from 1/s up, per minute below."""
    if value == 0:
        return "0"
    if value >= 1:
        return f"{value:,.1f}/s"
    return f"{value * 60:,.1f}/min"


def cell(rate: Rate | None, known: bool) -> str:
    """A queue's done rate in the queues table: blank when no live worker reports on the
    queue (`known` False), "…" while one of its workers has no rate yet."""
    if not known:
        return ""
    return "…" if rate is None else shown(rate.done)


def cards(rate: Rate | None, known: bool) -> list[tuple[str, str]]:
    """Done, retried and dead per second over the last minute, by the live workers."""
    if not known:
        return [("done (1 min)", "no worker reports")]
    if rate is None:
        return [("done (1 min)", "…")]
    by = f"{rate.workers} worker{'s' * (rate.workers != 1)}"
    return [
        ("done (1 min)", shown(rate.done)),
        ("retried (1 min)", shown(rate.retried)),
        ("dead-lettered (1 min)", shown(rate.dead)),
        ("reported by", by),
    ]
