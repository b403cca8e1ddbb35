"""Handler durations per queue, kept as a Prometheus histogram's buckets.

A worker adds a batch of durations at a time (an ack flush): one lock and one bisect
per job, and the exporter turns the counts cumulative only when it is scraped. This
avoids prometheus_client's Histogram (a lock per observation, a child per label
lookup) on the path of every job (docs/adr/0019).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable

BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""Upper bounds in seconds (`le`); +Inf is added: no-op jobs to five-minute reports."""


class Timings:
    """Per queue: the count of durations in each bucket (not cumulative), and their sum."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self._lock = threading.Lock()
        self._counts: dict[str, list[int]] = {}  # len(buckets) + 1 (the last: +Inf)
        self._sums: dict[str, float] = {}

    def observe(self, queue: str, seconds: Iterable[float]) -> None:
        bounds, find = self.buckets, bisect.bisect_left
        with self._lock:
            counts = self._counts.get(queue)
            if counts is None:
                counts = self._counts[queue] = [0] * (len(bounds) + 1)
                self._sums[queue] = 0.0
            total = 0.0
            for value in seconds:
                counts[find(bounds, value)] += 1  # the first bound >= value: le semantics
                total += value
            self._sums[queue] += total

    def snapshot(self) -> dict[str, tuple[list[tuple[str, int]], float]]:
        """queue -> ([(le, cumulative count), ..., ("+Inf", count)], sum)."""
        with self._lock:
            counts = {queue: list(values) for queue, values in self._counts.items()}
            sums = dict(self._sums)
        labels = [_le(bound) for bound in self.buckets] + ["+Inf"]
        result = {}
        for queue, values in counts.items():
            running, cumulative = 0, []
            for label, value in zip(labels, values, strict=True):
                running += value
                cumulative.append((label, running))
            result[queue] = (cumulative, sums[queue])
        return result


def _le(bound: float) -> str:
    """A bucket bound as Prometheus writes it (`0.005`, `1.0`)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))
