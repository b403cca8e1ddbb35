"""SQLite's busy handler (alkstore/sqlite/_busy.py), with an injected clock and sleep."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import apsw
import pytest
import tenacity

import alkstore
from alkstore.sqlite import _busy


def test_the_busy_handler_retries_quickly_then_less_often_until_its_timeout() -> None:
    now = [100.0]
    slept: list[float] = []
    wait = _busy.BusyWait(
        timeout=1.0,
        sleep=slept.append,
        clock=lambda: now[0],
        rand=lambda low, high: high,  # the longest sleep of each range
    )
    for tries in range(_busy.QUICK_TRIES + 5):
        assert wait(tries)
    assert slept[: _busy.QUICK_TRIES] == [_busy.QUICK_SLEEP[1]] * _busy.QUICK_TRIES
    assert slept[_busy.QUICK_TRIES :] == [_busy.SLOW_SLEEP[1]] * 5

    now[0] += 0.999
    assert wait(60), "gave up before the timeout"
    now[0] += 0.001
    assert not wait(61), "kept waiting past the timeout"

    now[0] += 10
    slept.clear()
    assert wait(0), "a new wait (tries == 0) must start a new timeout"
    assert slept == [_busy.QUICK_SLEEP[1]]


def test_a_lock_held_past_every_retry_is_database_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the write lock for longer than the busy handler and the
    retries wait: the store's writes raise DatabaseBusy (ADR 0001: no driver error
    crosses the seam), on a store transaction and on the hot path alike."""
    monkeypatch.setattr(_busy, "BusyWait", functools.partial(_busy.BusyWait, 0.05))
    monkeypatch.setattr(
        _busy,
        "_busy_retrying",
        tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(apsw.BusyError),
            stop=tenacity.stop_after_attempt(2),
            reraise=True,
        ),
    )
    path = tmp_path / "busy.db"
    store = alkstore.connect(f"sqlite:///{path}")
    holder = apsw.Connection(str(path))
    try:
        store.migrate()
        q = store.queue("q")
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(alkstore.DatabaseBusy), store.transaction() as tx:
            tx.enqueue("q", 1)
        with pytest.raises(alkstore.DatabaseBusy):
            q.enqueue(2)
        holder.execute("ROLLBACK")
        assert q.enqueue(3) > 0  # and the store works once the lock is free
    finally:
        holder.close()
        store.close()


def test_threads_take_turns_for_store_transactions_without_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second thread's store transaction waits for the first one's turn on a lock,
    not in the busy handler (ADR 0001, addendum 2026-12-01c), then commits."""
    calls: list[int] = []
    real = _busy.BusyWait.__call__

    def counted(self: _busy.BusyWait, tries: int) -> bool:
        calls.append(tries)
        return real(self, tries)

    monkeypatch.setattr(_busy.BusyWait, "__call__", counted)
    store = alkstore.connect(f"sqlite:///{tmp_path / 'turns.db'}")
    try:
        store.migrate()
        store.queue("q").enqueue(0)  # this thread's connection is open: the hot path
        began, done = threading.Event(), threading.Event()

        def second() -> None:
            began.set()
            with store.transaction() as tx:
                tx.enqueue("q", 2)
            done.set()

        with store.transaction() as tx:
            tx.enqueue("q", 1)
            thread = threading.Thread(target=second)
            thread.start()
            began.wait(5)
            assert not done.wait(0.2), "the second transaction did not wait its turn"
        thread.join(5)
        assert done.is_set()
        assert calls == [], "a thread waited for the write lock in the busy handler"
        assert store.queue("q").stats().ready == 3
    finally:
        store.close()


def test_a_turn_not_given_within_the_wait_is_database_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_busy, "WRITERS_WAIT", 0.1)
    store = alkstore.connect(f"sqlite:///{tmp_path / 'wait.db'}")
    try:
        store.migrate()
        errors: list[BaseException] = []

        def second() -> None:
            try:
                with store.transaction() as tx:
                    tx.enqueue("q", 2)
            except alkstore.DatabaseBusy as exc:
                errors.append(exc)

        with store.transaction() as tx:
            tx.enqueue("q", 1)
            thread = threading.Thread(target=second)
            thread.start()
            thread.join(5)
        assert len(errors) == 1 and "another thread of this process" in str(errors[0])
        with store.transaction() as tx:  # the turns go on
            tx.enqueue("q", 3)
        assert store.queue("q").stats().ready == 2
    finally:
        store.close()
