"""SQLite's busy handler (alkstore/sqlite/_busy.py), with an injected clock and sleep."""

from __future__ import annotations

import functools
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
