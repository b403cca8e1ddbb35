"""Helpers for the in-process worker tests (tests/contract/test_worker.py, test_leases.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import alkstore
import relay
from tests.conftest import Backend

POLL = 0.2  # seconds: the workers' poll, which is also how long stop() may take
JOIN = 60.0  # seconds a worker may take to return before the test fails
DEADLINE = 30.0  # seconds to wait for an expected state of the queues


class Gauge:
    """How many handlers are inside at once, and the most there ever were."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.total = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.total += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


@contextmanager
def running(worker: relay.Worker, **options: Any) -> Iterator[threading.Thread]:
    """`worker.run(**options)` in a thread; stopped and joined on exit."""
    failures: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(**options)
        except BaseException as exc:  # re-raised in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=target, name="test-worker", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(JOIN)
    assert not thread.is_alive(), f"the worker did not stop within {JOIN} s"
    if failures:
        raise failures[0]


def drain(worker: relay.Worker, timeout: float = JOIN) -> None:
    """`worker.run(once=True)` with a deadline."""
    with running(worker, once=True) as thread:
        thread.join(timeout)
        assert not thread.is_alive(), f"run(once=True) did not return within {timeout} s"


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.02)


def empty(q: alkstore.Queue) -> bool:
    return q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)


def corrupt(backend: Backend, job_id: int, type_name: str, payload: str) -> None:
    """Rewrite a stored job's event type and payload (what no producer can do)."""
    conn = backend.raw_connection()
    try:
        if backend.name == "postgres":
            with conn:
                conn.execute(
                    f"UPDATE {backend.namespace}.jobs SET type = %s, payload = %s::jsonb "
                    "WHERE id = %s",
                    (type_name, payload, job_id),
                )
        else:
            conn.execute(
                f"UPDATE {backend.namespace}__jobs SET type = ?, payload = ? WHERE id = ?",
                (type_name, payload, job_id),
            )
    finally:
        conn.close()
