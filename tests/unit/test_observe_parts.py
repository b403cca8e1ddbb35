"""The small parts of metrics and logs (docs/adr/0019), without a database: the handler
duration buckets, and the flags the running commands share."""

from __future__ import annotations

import logging

import pytest

from relay.cli import _parser, _processes
from relay.metrics._timings import Timings


def test_durations_fall_in_le_buckets_and_come_out_cumulative() -> None:
    timings = Timings(buckets=(0.01, 0.1, 1.0))
    timings.observe("q", [0.01, 0.05, 0.1, 2.0])  # a bound belongs to its own bucket (le)
    timings.observe("q", [0.0])
    timings.observe("other", [])
    buckets, total = timings.snapshot()["q"]
    assert buckets == [("0.01", 2), ("0.1", 4), ("1.0", 4), ("+Inf", 5)]
    assert total == pytest.approx(2.16)
    assert timings.snapshot()["other"] == ([("0.01", 0), ("0.1", 0), ("1.0", 0), ("+Inf", 0)], 0)


@pytest.mark.parametrize("command", ["relay", "scheduler", "worker"])
def test_the_running_commands_share_verbosity_and_metrics_flags(command: str) -> None:
    target = ["app:worker"] if command == "worker" else []
    parse = _parser.build().parse_args
    quiet = parse([command, *target])
    assert (quiet.verbose, quiet.metrics_port) == (0, None)
    loud = parse([command, *target, "-vv", "--metrics-port", "0"])
    assert (loud.verbose, loud.metrics_port) == (2, 0)


@pytest.mark.parametrize("text", ["-1", "65536", "http", ""])
def test_a_metrics_port_out_of_range_is_refused(text: str) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser.build().parse_args(["relay", "--metrics-port", text])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("verbosity", "ours", "theirs"),
    [
        (0, logging.INFO, logging.INFO),
        (1, logging.DEBUG, logging.INFO),
        (2, logging.DEBUG, logging.DEBUG),
    ],
)
def test_v_raises_alkstores_level_then_everyones(verbosity: int, ours: int, theirs: int) -> None:
    root, alkstore_log = logging.getLogger(), logging.getLogger("alkstore")
    saved = (root.level, list(root.handlers), alkstore_log.level)
    root.handlers = []  # as in a fresh process (pytest's own handlers come back below)
    try:
        _processes.logs(verbosity)
        assert logging.getLogger("alkstore.worker").getEffectiveLevel() == ours
        assert logging.getLogger("someapp").getEffectiveLevel() == theirs
    finally:
        for handler in root.handlers:
            handler.close()
        root.setLevel(saved[0])
        root.handlers = saved[1]
        alkstore_log.setLevel(saved[2])
