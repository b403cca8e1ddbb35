"""Counts of the events this process appended and the jobs it enqueued, for a metrics
exporter (`relay.metrics.serve` turns them on; docs/adr/0019).

Off by default: the append and enqueue paths then check one module attribute. On, they
count what committed: a store transaction adds its appends and enqueues when it commits
(a rollback counts nothing), `Queue.enqueue` / `enqueue_many` when theirs does.
`alkstore.append` on a connection the application holds is not counted: alkstore never
sees that commit. Jobs the relay makes from events are counted by the relay process.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable


class Counts:
    """Appended events per namespace, enqueued jobs per (namespace, queue)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._appended: Counter[str] = Counter()
        self._enqueued: Counter[tuple[str, str]] = Counter()

    def add(self, namespace: str, appended: int = 0, queues: Iterable[str] = ()) -> None:
        """`appended` events and a job per entry of `queues` (a queue once per job)."""
        with self._lock:
            if appended:
                self._appended[namespace] += appended
            for queue in queues:
                self._enqueued[namespace, queue] += 1

    def enqueued(self, namespace: str, queue: str, n: int) -> None:
        if n:
            with self._lock:
                self._enqueued[namespace, queue] += n

    def snapshot(self) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
        """(appended per namespace, enqueued per (namespace, queue)), so far."""
        with self._lock:
            return dict(self._appended), dict(self._enqueued)


counts: Counts | None = None
"""The process's counts once `enable()` ran; None: nothing is counted."""
_enabling = threading.Lock()


def enable() -> Counts:
    """Start counting (idempotent); returns the counts."""
    global counts
    with _enabling:
        if counts is None:
            counts = Counts()
        return counts


__all__ = ["Counts", "counts", "enable"]
