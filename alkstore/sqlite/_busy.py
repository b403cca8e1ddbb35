"""Waiting for SQLite's write lock without starving and without "database is locked".

Every alkstore connection gets a `BusyWait` handler, and BEGIN/COMMIT go through
`execute`, which retries with jitter past the handler's timeout (docs/adr/0001).
"""

from __future__ import annotations

import random
import threading
import time
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


# seconds a store transaction waits for this process's turn to write (sqlite/_group.py)
# before DatabaseBusy: the busy handler's wait, then the retries'
WRITERS_WAIT = BUSY_TIMEOUT + 30.0


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
