"""One sweep at a time per namespace (ADR 0006): a second sweeper that finds the sweep
lock held does nothing and says so (`ran=False`); once the first is done it runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import alkstore
from tests.conftest import Backend

WAIT = 30.0


@contextmanager
def sweep_held_open(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[alkstore.SweepResult]]:
    """`store.sweep()` in a thread, stopped inside its first batch until the block ends;
    the list gets its result."""
    inside, go_on = threading.Event(), threading.Event()
    engine = store.engine
    real_run = engine.run

    def run(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if name == "sweep_expired" and not inside.is_set():
            inside.set()
            assert go_on.wait(WAIT), "the test did not let the sweep go on"
        return real_run(name, params)

    monkeypatch.setattr(engine, "run", run)
    result: list[alkstore.SweepResult] = []
    thread = threading.Thread(target=lambda: result.append(store.sweep()), daemon=True)
    thread.start()
    try:
        assert inside.wait(WAIT), "the sweep never reached its first batch"
        yield result
    finally:
        go_on.set()
        thread.join(WAIT)
    assert not thread.is_alive()


def test_of_two_concurrent_sweepers_only_one_sweeps(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    with backend.migrated() as first, backend.migrated() as second:
        with sweep_held_open(first, monkeypatch) as result:
            assert second.sweep() == alkstore.SweepResult(ran=False)
            assert second.sweep() == alkstore.SweepResult(ran=False)
        assert result == [alkstore.SweepResult(True, 0, 0, 0)]
        assert second.sweep() == alkstore.SweepResult(True, 0, 0, 0), "the lock was kept"
        assert first.sweep() == alkstore.SweepResult(True, 0, 0, 0)


def test_a_sweep_that_fails_leaves_no_lock_behind(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    with backend.migrated() as first, backend.migrated() as second:
        real_run = first.engine.run

        def failing(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            if name == "sweep_exhausted":
                raise alkstore.StorageError("the sweep's batch failed")
            return real_run(name, params)

        monkeypatch.setattr(first.engine, "run", failing)
        with pytest.raises(alkstore.StorageError, match="batch failed"):
            first.sweep()
        monkeypatch.undo()
        assert second.sweep() == alkstore.SweepResult(True, 0, 0, 0)
        assert first.sweep() == alkstore.SweepResult(True, 0, 0, 0)
