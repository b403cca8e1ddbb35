"""The wake primitive: fires on commits from other processes, never for rolled-back work."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced

ROOT = Path(__file__).resolve().parents[2]
APPEND_ONE = """
import sys, alkstore
from tests.events import OrderPlaced
store = alkstore.connect(sys.argv[1], namespace=sys.argv[2])
with store.transaction() as tx:
    tx.append(OrderPlaced(order_id=int(sys.argv[3])))
store.close()
"""


def settle(listener: alkstore.Listener) -> None:
    """Consume the wake a fresh PostgreSQL listener fires once it is connected."""
    listener.wait(1.0)
    while listener.wait(0.05):
        pass


def test_commit_in_another_process_wakes_a_listener(
    store: alkstore.Store, backend: Backend
) -> None:
    listener = store.listen()
    settle(listener)
    child = subprocess.run(
        [sys.executable, "-c", APPEND_ONE, backend.url, backend.namespace, "7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert listener.wait(5.0), "no wake within 5 s of another process's commit"
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=7)]


def test_commit_in_another_thread_wakes_quickly(store: alkstore.Store, backend: Backend) -> None:
    listener = store.listen()
    settle(listener)
    other = backend.connect()
    try:
        with other.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))
        started = time.monotonic()
        assert listener.wait(5.0)
        # not a timing assertion: a generous bound that polling-only would still miss
        assert time.monotonic() - started < 1.0
    finally:
        other.close()


def test_rollback_does_not_wake(store: alkstore.Store) -> None:
    listener = store.listen()
    settle(listener)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
        raise RuntimeError("roll back")
    assert not listener.wait(0.3)
    assert store.log.read() == []


def test_every_listener_sees_each_wake(store: alkstore.Store) -> None:
    first, second = store.listen(), store.listen()
    settle(first)
    settle(second)
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
    assert first.wait(5.0) and second.wait(5.0)


WAKE_WITH_HIGH_FDS = """
import os, resource, sys, alkstore
from tests.events import OrderPlaced
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < 2048:
    resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # every new fd is >= 1100
store = alkstore.connect(sys.argv[1], namespace=sys.argv[2])
listener = store.listen()
listener.wait(1.0)
while listener.wait(0.05):
    pass
other = alkstore.connect(sys.argv[1], namespace=sys.argv[2])
with other.transaction() as tx:
    tx.append(OrderPlaced(order_id=1))
print("woke" if listener.wait(5.0) else "no wake", flush=True)
other.close()
store.close()
"""


def test_a_listener_wakes_when_its_descriptors_are_above_1024(
    store: alkstore.Store, backend: Backend
) -> None:
    """select() fails on a descriptor >= 1024 (a busy server process has that many open);
    the wake sources wait with poll()."""
    child = subprocess.run(
        [sys.executable, "-c", WAKE_WITH_HIGH_FDS, backend.url, backend.namespace],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "woke", child.stderr
    assert "Traceback" not in child.stderr, child.stderr
