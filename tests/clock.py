"""The injected store clock of the tests: epoch seconds, moved by hand.

Kept in whole milliseconds (the stores' resolution), so any number of small
steps adds up exactly and `int(clock() * 1000)` is always the millisecond meant.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)  # 00:00 UTC, 01:00 in Berlin: the schedule suites' T0


class Clock:
    def __init__(self, start: float | None = None) -> None:
        """Start at `start` (epoch seconds), or at the real time to the millisecond."""
        self.ms = round((time.time() if start is None else start) * 1000)

    def __call__(self) -> float:
        return self.ms / 1000

    @property
    def now(self) -> float:
        return self.ms / 1000

    @now.setter
    def now(self, seconds: float) -> None:
        self.ms = round(seconds * 1000)

    def advance(self, seconds: float) -> None:
        self.ms += round(seconds * 1000)

    def set(self, when: datetime) -> None:
        self.now = when.timestamp()
