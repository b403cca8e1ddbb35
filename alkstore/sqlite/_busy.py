"""Waiting for SQLite's write lock without starving and without "database is locked".

Every alkstore connection gets a `BusyWait` handler, and BEGIN/COMMIT go through
`execute`, which retries with jitter past the handler's timeout (docs/adr/0001).
"""

from __future__ import annotations

import os
import random
import threading
import time
import weakref
from collections.abc import Callable

import apsw
import tenacity

BUSY_TIMEOUT = 5.0  # seconds a statement waits for a lock before BusyError
QUICK_TRIES = 50  # the first tries (about 30 ms) come closer together...
QUICK_SLEEP = (0.0002, 0.001)  # ...uniform in this range of seconds,
SLOW_SLEEP = (0.001, 0.003)  # and after them in this one


_busy_retrying = tenacity.Retrying(
    retry=tenacity.retry_if_exception_type(apsw.BusyError),
    wait=tenacity.wait_random_exponential(multiplier=0.002, max=0.1),
    stop=tenacity.stop_after_delay(30),
    reraise=True,
)


class Gate:
    """First in line for the write lock, within one process (ADR 0012).

    While a reserved connection (lease renewal) waits for the lock, this process's
    other connections neither begin a write nor retry a busy one, so a renewal is
    never starved by the worker's own handlers holding the lock one after another."""

    def __init__(self) -> None:
        self.waiting = 0  # read without the lock on the hot path: a plain int
        self._cond = threading.Condition()

    def enter(self) -> None:
        with self._cond:
            self.waiting += 1

    def leave(self) -> None:
        with self._cond:
            self.waiting -= 1
            self._cond.notify_all()

    def hold(self, timeout: float) -> None:
        """Wait (up to `timeout`) until no reserved connection waits."""
        with self._cond:
            self._cond.wait_for(lambda: self.waiting == 0, timeout)


WRITERS_WAIT = BUSY_TIMEOUT + 30.0  # seconds: the busy handler's wait, then the retries'


class Writers:
    """This process's store transactions, one at a time (ADR 0001, addendum 2026-12-01c).

    Threads of one process that open store transactions at once (a worker's handlers)
    would each wait for SQLite's write lock in the busy handler, a Python callback that
    takes the GIL every 0.2-1 ms: the thread holding the lock then waits for the GIL
    after each of its statements, and holds the lock the longer. Here they wait on a
    lock that costs nothing while it waits; the one that gets it waits in the busy
    handler only for other processes and this one's own claims and acks. Waiting
    longer than a BEGIN waited before (WRITERS_WAIT) is DatabaseBusy."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _WRITERS.add(self)

    def enter(self) -> bool:
        """False: not our turn within WRITERS_WAIT."""
        return self._lock.acquire(timeout=WRITERS_WAIT)

    def leave(self) -> None:
        self._lock.release()


_WRITERS: weakref.WeakSet[Writers] = weakref.WeakSet()


def _after_fork() -> None:
    """A child process starts with every turn free: a lock a thread of the parent held
    at the fork would otherwise stay taken in the child, with no thread to free it."""
    for writers in list(_WRITERS):
        writers._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


class BusyWait:
    """A connection's busy handler: try again every 0.2-1 ms, then every 1-3 ms,
    until BUSY_TIMEOUT.

    SQLite's own busy timeout sleeps 1, 2, 5 ... then 100 ms between tries, and a
    writer that commits and begins again at once takes the lock back within
    microseconds: beside two draining workers an enqueue waited up to 1.3 s.
    Trying every few milliseconds catches the gaps between their transactions
    (40 ms at most there), at the cost of about 500 lock attempts per second
    while a connection waits (docs/adr/0001)."""

    def __init__(
        self,
        timeout: float = BUSY_TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[float, float], float] = random.uniform,
        gate: Gate | None = None,
    ) -> None:
        self._gate = gate
        self._timeout = timeout
        self._sleep = sleep
        self._clock = clock
        self._rand = rand
        self._deadline = 0.0

    def __call__(self, tries: int) -> bool:
        """`tries`: how often this lock was already retried. False gives up (BusyError)."""
        now = self._clock()
        if tries == 0:
            self._deadline = now + self._timeout
        elif now >= self._deadline:
            return False
        if self._gate is not None and self._gate.waiting:
            self._gate.hold(max(0.0, self._deadline - now))  # let the reserved one go first
            return True
        self._sleep(self._rand(*(QUICK_SLEEP if tries < QUICK_TRIES else SLOW_SLEEP)))
        return True


def execute(conn: apsw.Connection, statement: str) -> None:
    """Run BEGIN/COMMIT; past the busy timeout, retry with jitter so "database is locked"
    never reaches user code. The fast path builds no retry machinery."""
    try:
        conn.execute(statement)
    except apsw.BusyError:
        _busy_retrying(conn.execute, statement)
