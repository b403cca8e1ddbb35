"""A claimer's cursor into the claim index, for PostgreSQL (docs/adr/0027).

While a snapshot older than the drain stays open (a transaction idle for minutes, a
long report, a replica's feedback), PostgreSQL may neither remove nor mark dead the
claim-index entries of jobs processed since it began: a claim that reads a level's
range from its start visits every one of them, so a drain slows in proportion to its
own history (0.11x after ten minutes; docs/performance.md, issue 13 item 8).

A `Cursor` remembers, per priority level, the claim-index entry (`visible_at`, `id`) of
the last job this claimer took there, and lets `Queue.claim_many` run the `claim_from` statement,
whose ranges start at those times and which probes no level, between full claims. A
full claim (the `claim` statement: every level from its start) still runs often
enough to find what lands behind the cursor (a transaction that committed after jobs
enqueued later were claimed, a job given back early) and levels the cursor does not
know. The cursor is used only after SLOW_RUNS full claims in a row were slow (over
FAST seconds plus PER_JOB seconds per job taken: 35 ms for 100 jobs, 7-30 times a
normal claim on a loaded two-core machine; under an old snapshot claims reach
hundreds of milliseconds), so that on a healthy database claims are full ones and keep
their exact order. While
the full claims are slow, the next one runs once the time since the last one is SHARE
times what it took: full claims take at most about 1 / (SHARE + 1) of a claimer's time,
and a job behind the cursor waits at most that long. An idle worker does not sleep
through it: `Queue.next_due()` reads the claim index itself, finds such a job due now,
and the worker looks again, sooner than its poll (relay/worker/_due.py).

SQLite deletes a row's index entries with the row: its claims never need a cursor.

`Claims` runs a claimer's plain claims on PostgreSQL: from the cursor when it is
engaged, else the full claim, or `claim_top` (the top priority level's range alone) while
the last claim was filled from one level (an ordered queue's claimer: no cursor, the
other two). The full claim's plan (a probe per level, then
the walk below them) costs ~70 us more to start than one range (docs/performance.md,
issue 12), paid per claim by a worker that drains a queue of one priority. A top claim
that comes back short is followed by a full claim for the rest in the same call, so the
jobs a call returns are the ones the full claim would have returned.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from time import perf_counter  # (not through `time`: tests give the cursor a clock of theirs)
from typing import Any, Protocol

FAST = 0.025  # seconds: a full claim is slow past FAST + PER_JOB per job it took
PER_JOB = 0.0001  # (a normal claim: ~0.2-2 ms and ~10-50 us per job on two busy cores)
SLOW_RUNS = 3  # slow full claims in a row before claims come from the cursor
SHARE = 9.0  # time between slow full claims, in multiples of the last one's time
LEVELS = 32  # priority levels a cursor remembers at most


class Cursor:
    """Where one claimer (a Queue object) took its last jobs, per priority level."""

    def __init__(self) -> None:
        self._at: dict[int, tuple[int, int]] = {}  # priority -> (visible_at, id) taken last
        self._full_after = 0.0  # monotonic time of the next full claim
        self._slow = 0  # slow full claims in a row

    def start(self) -> str | None:
        """The `from` parameter of a claim from the cursor (levels highest first), or
        None: the next claim is a full one."""
        if not self._at or time.monotonic() >= self._full_after:
            return None
        return json.dumps([[p, v, i] for p, (v, i) in sorted(self._at.items(), reverse=True)])

    def took(self, rows: Sequence[tuple[Any, ...]], full: bool, seconds: float) -> None:
        """Record a claim's rows (id at [0], priority at [2], claimed run time at [3]) and, for a
        full claim, how long it took."""
        if full:
            slow = seconds >= FAST + PER_JOB * len(rows)
            self._slow = self._slow + 1 if slow else 0
            wait = SHARE * seconds if self._slow >= SLOW_RUNS else 0.0
            self._full_after = time.monotonic() + wait
            if not slow:  # the common case costs no look at the rows: the slow full
                return  # claims before the cursor is used record where they ended
        at = self._at
        if len(at) > LEVELS:  # levels come and go: forget them, the full claims relearn
            at.clear()
        for row in rows:
            priority, entry = row[2], (row[3], row[0])
            if priority not in at or entry > at[priority]:
                at[priority] = entry


class _Runs(Protocol):
    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]: ...


class Claims:
    """A claimer's plain claims on PostgreSQL: from its cursor, from the top level alone,
    or full (see the module's docstring)."""

    def __init__(self, engine: _Runs, *, cursor: bool = True) -> None:
        """`cursor=False`: never from a cursor, for an ordered queue, whose jobs come back
        behind one (a held job promoted keeps its old run time)."""
        self._engine = engine
        self._cursor = Cursor() if cursor else None
        self._top = False  # the last claim was filled from one priority level

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The claim `name` (the full claim's statement) with `params`."""
        run = self._engine.run
        start = self._cursor.start() if self._cursor is not None else None
        began = perf_counter()
        if start is not None:
            rows = run("claim_from", {**params, "from": start})
        elif self._top:
            rows = run("claim_top", params)
            if len(rows) < params["n"]:  # the top level ran short: the rest as `claim` would
                rows += run(name, {**params, "n": params["n"] - len(rows)})
        else:
            rows = run(name, params)
        full = start is None
        if full:
            self._top = len(rows) == params["n"] and _one_level(rows)
        if self._cursor is not None:
            self._cursor.took(rows, full, perf_counter() - began)
        return rows


def _one_level(rows: Sequence[tuple[Any, ...]]) -> bool:
    """All rows (priority at [2]) are of one priority level."""
    first = rows[0][2]
    return all(row[2] == first for row in rows)
