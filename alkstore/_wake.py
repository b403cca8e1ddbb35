"""The wake primitive: block until something new may have been committed.

An engine owns one `Wake` and fires it from a background source (PostgreSQL
LISTEN/NOTIFY, SQLite's data_version watcher). A wake is only a hint: it never
carries data, so a reader always re-reads committed state after waking, and a
spurious wake costs one empty read. Consumers also pass a timeout, which is the
re-poll safety net.

A wake source that fails loses nothing (consumers re-poll) but makes everything
wait up to a re-poll interval longer, so its failures are logged (`Trouble`, on
the "alkstore.wake" logger) instead of swallowed. See docs/adr/0005.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("alkstore.wake")
REPORT_EVERY = 60.0  # seconds: at most one WARNING this often while a source keeps failing


class Wake:
    """A generation counter with a condition variable."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def fire(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    @property
    def generation(self) -> int:
        return self._generation

    def listener(self) -> Listener:
        return Listener(self)


class Listener:
    """One consumer's view of a Wake: `wait()` returns once per new generation."""

    def __init__(self, wake: Wake) -> None:
        self._wake = wake
        self._seen = wake.generation

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a commit was signalled since the last wait; False on timeout."""
        wake = self._wake
        with wake._cond:
            fired = wake._cond.wait_for(lambda: wake._generation != self._seen, timeout)
            self._seen = wake._generation
        return fired

    def pending(self) -> bool:
        """True if a wake arrived since the last wait (without blocking)."""
        return self._wake.generation != self._seen


class Trouble:
    """The failures of one wake source, told to the operator without flooding the log.

    A failure is a WARNING with its cause and what happens next, at most one per
    REPORT_EVERY seconds (the next one says how many were not logged); the first
    success after failures is an INFO line. Used from the source's own thread only.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.failures = 0
        self._unlogged = 0
        self._logged_at = -REPORT_EVERY

    def failed(self, cause: BaseException | str, then: str) -> None:
        """Record a failure: `cause` (an exception or the server's message), `then`: what
        the source does next."""
        self.failures += 1
        now = time.monotonic()
        if now - self._logged_at < REPORT_EVERY:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more times since the last report)" if self._unlogged else ""
        self._logged_at, self._unlogged = now, 0
        log.warning("%s failed%s: %s; %s", self.source, more, describe(cause), then)

    def recovered(self) -> None:
        """Record a success: logs once after failures (a cheap check otherwise)."""
        if self.failures:
            n, self.failures = self.failures, 0
            log.info("%s works again (%d failure%s)", self.source, n, "" if n == 1 else "s")


def describe(cause: BaseException | str) -> str:
    """One line: the exception's type and message (a server's message may span lines)."""
    text = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
    return " ".join(text.split()).rstrip(".")
