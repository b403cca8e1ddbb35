"""The wake primitive: block until something new may have been committed.

An engine owns one `Wake` and fires it from a background source (PostgreSQL
LISTEN/NOTIFY, SQLite's data_version watcher). A wake is only a hint: it never
carries data, so a reader always re-reads committed state after waking, and a
spurious wake costs one empty read. Consumers also pass a timeout, which is the
re-poll safety net.
"""

from __future__ import annotations

import threading


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
