"""`_wake.Trouble`: a failing wake source is one WARNING a minute with its cause, and one
INFO line when it works again."""

from __future__ import annotations

import logging

import pytest

from alkstore import _wake


def test_failures_are_logged_at_most_once_a_minute_with_the_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore.wake")
    now = [1000.0]
    monkeypatch.setattr("alkstore._wake.time.monotonic", lambda: now[0])
    trouble = _wake.Trouble("test source")
    trouble.failed(ConnectionError("refused\n  by the server."), "retrying")
    for _ in range(3):
        now[0] += 10
        trouble.failed("still down", "retrying")
    now[0] += 30  # 60 s after the first report
    trouble.failed("still down", "retrying")
    trouble.recovered()
    trouble.recovered()  # nothing more to say
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "test source failed: ConnectionError: refused by the server; retrying"),
        (
            logging.WARNING,
            "test source failed (3 more times since the last report): still down; retrying",
        ),
        (logging.INFO, "test source works again (5 failures)"),
    ]
