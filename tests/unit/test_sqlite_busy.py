"""SQLite's busy handler (alkstore/sqlite/_busy.py), with an injected clock and sleep."""

from __future__ import annotations

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
