"""`alkstore schedules add|list|pause|resume|remove` and `alkstore scheduler` as a user runs
them: subprocesses on real databases, their output, exit codes and error messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.processes import CliProcess

ROOT = Path(__file__).resolve().parents[2]
ADD_EVENT = ["--event", "tests.events:OrderPlaced", "--data", '{"order_id": 1}']


def cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ALKSTORE_DB"}


def run(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "relay.cli",
            *args,
            "--db",
            backend.url,
            "--namespace",
            backend.namespace,
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(backend: Backend, *args: str) -> list[str]:
    out = run(backend, *args)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr
    return out.stdout.rstrip("\n").splitlines()


def fails(backend: Backend, *args: str, code: int = 1) -> str:
    """Run a command that must fail cleanly; its stderr."""
    out = run(backend, *args)
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("alkstore: ") or out.stderr.startswith("usage:"), out.stderr
    return out.stderr


@pytest.fixture
def migrated(backend: Backend) -> Iterator[alkstore.Store]:
    with backend.migrated() as store:
        yield store


def parse_row(line: str) -> tuple[str, str, str, str, str]:
    name, spec, tz, event_type, state = line.split("\t")
    return name, spec, tz, event_type, state


def next_times(state: str) -> list[datetime]:
    assert state.startswith("next "), state
    return [datetime.fromisoformat(t) for t in state.removeprefix("next ").split(", ")]


def test_add_list_pause_resume_remove(backend: Backend, migrated: alkstore.Store) -> None:
    before = datetime.now(UTC)
    out = ok(backend, "schedules", "add", "heartbeat", "--every", "30s", *ADD_EVENT)
    assert out[0] == "added heartbeat"
    name, spec, tz, event_type, state = parse_row(out[1])
    assert (name, spec, tz, event_type) == ("heartbeat", "every 30s", "UTC", "test.order_placed")
    times = next_times(state)
    assert len(times) == 3
    assert before - timedelta(seconds=1) <= times[0] <= datetime.now(UTC)
    assert [b - a for a, b in pairwise(times)] == [timedelta(seconds=30)] * 2
    stored = migrated.schedules.get("heartbeat")
    assert stored.every_ms == 30_000 and stored.catch_up == "latest" and stored.key is None
    assert json.loads(stored.payload) == {
        "type": "test.order_placed",
        "order_id": 1,
        "total_cents": 0,
    }
    assert migrated.log.head() == 0  # adding fires nothing

    out = ok(
        backend,
        "schedules",
        "add",
        "standup",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--catch-up",
        "none",
        "--key",
        "team",
        *ADD_EVENT,
    )
    assert out[0] == "added standup"
    name, spec, tz, _event_type, state = parse_row(out[1])
    assert (name, spec, tz) == ("standup", "0 9 * * 1-5", "Europe/Berlin")
    for when in next_times(state):
        local = when.astimezone(ZoneInfo("Europe/Berlin"))
        assert (local.hour, local.minute, local.second) == (9, 0, 0) and local.weekday() < 5
    standup = migrated.schedules.get("standup")
    assert standup.catch_up == "none" and standup.key == "team"

    rows = [parse_row(line) for line in ok(backend, "schedules", "list")]
    assert [r[0] for r in rows] == ["heartbeat", "standup"]
    assert all(r[4].startswith("next ") for r in rows)

    assert ok(backend, "schedules", "pause", "heartbeat") == ["paused heartbeat"]
    assert migrated.schedules.get("heartbeat").paused
    rows = [parse_row(line) for line in ok(backend, "schedules", "list")]
    assert rows[0][0] == "heartbeat" and rows[0][4] == "paused"
    assert rows[1][4].startswith("next ")

    resumed_at = datetime.now(UTC)
    out = ok(backend, "schedules", "resume", "heartbeat")
    assert out[0] == "resumed heartbeat" and len(out) == 2
    times = next_times(parse_row(out[1])[4])
    assert resumed_at < times[0] <= datetime.now(UTC) + timedelta(seconds=30)
    assert not migrated.schedules.get("heartbeat").paused

    assert ok(backend, "schedules", "remove", "heartbeat") == ["removed heartbeat"]
    assert [parse_row(line)[0] for line in ok(backend, "schedules", "list")] == ["standup"]
    assert [s.name for s in migrated.schedules.list()] == ["standup"]


def test_list_with_no_schedules_prints_nothing(backend: Backend, migrated: alkstore.Store) -> None:
    out = run(backend, "schedules", "list")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


def test_bad_cron_is_a_clear_error(backend: Backend, migrated: alkstore.Store) -> None:
    err = fails(backend, "schedules", "add", "nightly", "--cron", "61 * * * *", *ADD_EVENT)
    assert err.strip() == "alkstore: invalid cron expression '61 * * * *'"
    assert migrated.schedules.list() == []


@pytest.mark.parametrize("action", ["pause", "resume", "remove"])
def test_unknown_schedule_is_a_clear_error(
    backend: Backend, migrated: alkstore.Store, action: str
) -> None:
    err = fails(backend, "schedules", action, "ghost")
    assert err.strip() == "alkstore: no schedule named 'ghost'"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--every", "30", *ADD_EVENT], "every must look like"),
        (["--every", "0s", *ADD_EVENT], "every must be a positive interval"),
        (["--every", "30s", "--tz", "Mars/Base", *ADD_EVENT], "unknown time zone 'Mars/Base'"),
        (["--every", "30s", "--cron", "* * * * *", *ADD_EVENT], "exactly one of cron= or every="),
        ([*ADD_EVENT], "exactly one of cron= or every="),
    ],
)
def test_bad_add_arguments_are_clear_errors(
    backend: Backend, migrated: alkstore.Store, args: list[str], message: str
) -> None:
    err = fails(backend, "schedules", "add", "s", *args)
    assert message in err
    assert migrated.schedules.list() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "s", "--every", "30s"], "needs --event module:Class"),
        (["add", "--every", "30s", *ADD_EVENT], "schedules add needs a NAME"),
        (["pause"], "schedules pause needs a NAME"),
        (["add", "s", "--every", "30s", "--event", "tests.events:Nope"], "cannot build the event"),
        (["add", "s", "--every", "1s", "--event", "no_such_module:X"], "cannot build the event"),
        (
            ["add", "s", "--every", "1s", "--event", "tests.events:OrderPlaced", "--data", "{"],
            "cannot build the event",
        ),
        (
            ["add", "s", "--every", "1s", "--event", "tests.events:OrderPlaced", "--data", "{}"],
            "cannot build the event",  # order_id is required
        ),
    ],
)
def test_incomplete_commands_exit_2(
    backend: Backend, migrated: alkstore.Store, args: list[str], message: str
) -> None:
    err = fails(backend, "schedules", *args, code=2)
    assert message in err
    assert migrated.schedules.list() == []


def test_bad_name_and_duplicate_are_clear_errors(
    backend: Backend, migrated: alkstore.Store
) -> None:
    err = fails(backend, "schedules", "add", "Bad-Name", "--every", "30s", *ADD_EVENT)
    assert "invalid schedule name 'Bad-Name'" in err
    ok(backend, "schedules", "add", "s", "--every", "30s", *ADD_EVENT)
    err = fails(backend, "schedules", "add", "s", "--every", "1m", *ADD_EVENT)
    assert err.strip() == "alkstore: a schedule named 's' already exists"
    assert migrated.schedules.get("s").every_ms == 30_000


def test_unknown_action_is_a_usage_error(backend: Backend, migrated: alkstore.Store) -> None:
    err = fails(backend, "schedules", "explode", "s", code=2)
    assert "invalid choice: 'explode'" in err


def test_never_matching_cron_is_a_clear_error(backend: Backend, migrated: alkstore.Store) -> None:
    err = fails(backend, "schedules", "add", "feb30", "--cron", "0 0 30 2 *", *ADD_EVENT)
    assert "cron" in err
    assert migrated.schedules.list() == []


def test_scheduler_command_fires_schedules_until_sigterm(
    backend: Backend, migrated: alkstore.Store, tmp_path: Path
) -> None:
    ok(backend, "schedules", "add", "beat", "--every", "1s", "--catch-up", "all", *ADD_EVENT)
    args = ["--db", backend.url, "--namespace", backend.namespace, "--lease-ttl", "1"]
    scheduler = CliProcess("scheduler", args, tmp_path / "scheduler.log")
    try:
        deadline = time.monotonic() + 30
        while migrated.log.head() < 3:
            assert scheduler.alive(), scheduler.output()
            assert time.monotonic() < deadline, "the scheduler fired nothing"
            time.sleep(0.1)
        assert scheduler.terminate() == 0, scheduler.output()
    finally:
        scheduler.close()
    output = scheduler.output()
    assert "scheduler is active" in output and "Traceback" not in output
    entries = migrated.log.read(limit=1_000)
    assert {e.headers["alkstore-schedule"] for e in entries} == {"beat"}
    assert all(e.payload == OrderPlaced(order_id=1) for e in entries)
    boundaries = [datetime.fromisoformat(e.headers["alkstore-boundary"]) for e in entries]
    assert [b - a for a, b in pairwise(boundaries)] == [timedelta(seconds=1)] * (
        len(boundaries) - 1
    )
    # the lease was released on SIGTERM
    info = migrated.lease("scheduler", 1).holder_info()
    assert info is not None and info[2].timestamp() == 0
    # and `events tail` shows the headers
    tail = ok(backend, "events", "tail")
    assert len(tail) == len(entries) and "alkstore-schedule" in tail[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--every", "1ms"], "alkstore: every must be at least 1s"),
        (["--every", "0.5s"], "alkstore: every must be at least 1s"),
        (["--cron", "0 * * * * *"], "or mark the seconds as first: '@seconds-first 0 * * * * *'"),
        (["--cron", "30-10 * * * *"], "wraps around; write '30-59,0-10 * * * *'"),
    ],
)
def test_refused_schedules_say_what_to_write_instead(
    backend: Backend, migrated: alkstore.Store, args: list[str], message: str
) -> None:
    err = fails(backend, "schedules", "add", "s", *args, *ADD_EVENT)
    assert err.startswith(message) if message.startswith("alkstore:") else message in err
    assert len(err.strip().splitlines()) == 1, err
    assert migrated.schedules.list() == []


def test_seconds_first_cron_from_the_cli(backend: Backend, migrated: alkstore.Store) -> None:
    cron = "@seconds-first 0 * * * * *"  # honker's every minute
    out = ok(backend, "schedules", "add", "m", "--cron", cron, *ADD_EVENT)
    assert out[0] == "added m"
    _name, spec, _tz, _type, state = parse_row(out[1])
    assert spec == cron
    times = next_times(state)
    assert all(t.second == 0 for t in times)
    assert [b - a for a, b in pairwise(times)] == [timedelta(minutes=1)] * 2
