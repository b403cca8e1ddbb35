"""Waiting for SQLite's write lock without starving and without "database is locked".

Every alkstore connection gets a `BusyWait` handler, and BEGIN/COMMIT go through
`execute`, which retries with jitter past the handler's timeout (docs/adr/0001).
"""

from __future__ import annotations

import random
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
    ) -> None:
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
        self._sleep(self._rand(*(QUICK_SLEEP if tries < QUICK_TRIES else SLOW_SLEEP)))
        return True


def execute(conn: apsw.Connection, statement: str) -> None:
    """Run BEGIN/COMMIT; past the busy timeout, retry with jitter so "database is locked"
    never reaches user code. The fast path builds no retry machinery."""
    try:
        conn.execute(statement)
    except apsw.BusyError:
        _busy_retrying(conn.execute, statement)
