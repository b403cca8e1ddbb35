"""Capacity: handler threads that never hold up exit, and per-queue / total slots."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class DaemonPool:
    """Handler threads that never hold up interpreter exit (unlike ThreadPoolExecutor's):
    a handler abandoned after the grace period must not keep a stopping process alive."""

    def __init__(self, size: int) -> None:
        self._tasks: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"handler-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._tasks.put((fn, args))

    def shutdown(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            fn, args = task
            fn(*args)  # never raises: the outcome runner settles every ending


@dataclass
class Slots:
    """In-flight counts per queue and in total, under one condition. (Every finished
    job gives its slot back: `give` takes the lock itself, a C call, and notifies only
    when the claim loop waits.)"""

    total: int
    per_queue: dict[str, int]
    busy: Counter[str] = field(default_factory=Counter)
    lock: threading.RLock = field(default_factory=threading.RLock)
    waiting: int = 0  # threads in wait_free

    def __post_init__(self) -> None:
        self.cond = threading.Condition(self.lock)

    def take(self, queue: str, want: int) -> int:
        with self.lock:
            free = min(
                self.per_queue[queue] - self.busy[queue], self.total - sum(self.busy.values())
            )
            n = max(0, min(want, free))
            self.busy[queue] += n
            return n

    def give(self, queue: str, n: int = 1) -> None:
        if n:
            with self.lock:
                self.busy[queue] -= n
                if self.waiting:
                    self.cond.notify_all()

    def wait_free(self, queue: str, timeout: float) -> None:
        with self.lock:
            self.waiting += 1
            try:
                self.cond.wait_for(
                    lambda: (
                        self.busy[queue] < self.per_queue[queue]
                        and sum(self.busy.values()) < self.total
                    ),
                    timeout,
                )
            finally:
                self.waiting -= 1

    def wake(self) -> None:
        with self.lock:
            self.cond.notify_all()
