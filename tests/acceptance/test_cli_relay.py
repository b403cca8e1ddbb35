"""The relay's commands as a user runs them: `alkstore status`, `alkstore events replay`,
`alkstore relay`, as subprocesses on real databases, with their output and exit codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced, Written
from tests.processes import CliProcess

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def migrated(backend: Backend) -> Iterator[alkstore.Store]:
    with backend.migrated() as store:
        yield store


def lines(out: str) -> list[str]:
    return out.rstrip("\n").splitlines()


LAG = re.compile(
    r"  (?P<queue>\w+): checkpoint (?P<checkpoint>\d+), (?P<events>-?\d+) events / "
    r"(?P<age>caught up|\d+\.\ds behind); jobs ready (?P<ready>\d+), scheduled (?P<scheduled>\d+), "
    r"active (?P<active>\d+), dead (?P<dead>\d+)(?:, oldest (?P<oldest>\d+\.\d)s)?"
)


def lag_lines(out: str) -> dict[str, re.Match[str]]:
    """The subscription lines of `alkstore status`, parsed, by queue."""
    found = {}
    for line in lines(out)[1:]:
        match = LAG.fullmatch(line)
        if match:
            found[match["queue"]] = match
    return found


def section(out: str, title: str) -> list[str]:
    """The names listed under `title:` in `alkstore status` (its indented lines)."""
    found, inside = [], False
    for line in lines(out):
        if not line.startswith("  "):
            inside = line == f"{title}:"
        elif inside:
            found.append(line.split(":")[0].strip())
    return found


def test_status_on_an_empty_store(backend: Backend, migrated: alkstore.Store) -> None:
    out = run(backend, "status")
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout) == [
        "log head: 0",
        "subscriptions: none",
        "queues: none",
        "schedules: none",
        "leaders:",
        "  relay: none",
        "  scheduler: none; the relay fires schedules unless run without them",
        "  sweeper: none yet (relays and workers sweep, one at a time)",
        "workers: none",
        "retention: dead letters kept 14d unless their queue says; events kept 7d once every "
        "subscription relayed them (defaults, no sweep yet)",
    ]
    assert out.stderr == ""


def test_status_shows_the_head_and_the_lag_of_each_subscription(
    backend: Backend, migrated: alkstore.Store
) -> None:
    store = migrated
    store.subscribe("all", ["*"], start="beginning")
    store.subscribe("orders", ["test.order_placed"], start="beginning")
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
        tx.append(Written(writer=1, seq=1))
    store.relay_batch()
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=2))
    time.sleep(0.3)  # so the oldest unrelayed event is visibly old

    out = run(backend, "status")
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout)[0] == "log head: 3"
    lags = lag_lines(out.stdout)
    assert sorted(lags) == ["all", "orders"], out.stdout
    # PostgreSQL: nothing numbered the last commit before status did (ADR 0004)
    backlog = ["unsequenced: 1 committed event had no position yet (numbered now)"]
    extra = backlog if backend.name == "postgres" else []
    assert lines(out.stdout)[1 : 1 + len(extra)] == extra, out.stdout
    assert section(out.stdout, "subscriptions") == sorted(lags), out.stdout
    for queue, ready in (("all", "2"), ("orders", "1")):
        lag = lags[queue]
        assert (lag["checkpoint"], lag["events"], lag["ready"]) == ("2", "1", ready), lag
        assert lag["age"].endswith("s behind") and float(lag["age"].split("s")[0]) >= 0.2
        assert (lag["scheduled"], lag["active"], lag["dead"]) == ("0", "0", "0")
        assert lag["oldest"] is not None

    store.relay_batch()
    out = run(backend, "status")
    lags = lag_lines(out.stdout)
    assert {q: (g["checkpoint"], g["events"], g["age"]) for q, g in lags.items()} == {
        "all": ("3", "0", "caught up"),
        "orders": ("3", "0", "caught up"),
    }


def test_events_replay_confirms_and_moves_the_checkpoint(
    backend: Backend, migrated: alkstore.Store
) -> None:
    store = migrated
    store.subscribe("orders", ["test.order_placed"], start="beginning")
    with store.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=n) for n in range(1, 4)])
    store.relay_batch()
    queue = store.queue("orders")
    queue.ack_many(queue.claim_many(10))

    out = run(backend, "events", "replay", "--queue", "orders", "--from", "2")
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout) == ["orders: 2 events will be delivered again (positions 2-3)"]
    assert out.stderr == ""
    assert store.subscriptions() == [alkstore.Subscription("orders", ["test.order_placed"], 1)]

    status = run(backend, "status")
    (lag,) = lag_lines(status.stdout).values()
    assert (lag["checkpoint"], lag["events"]) == ("1", "2")
    assert store.relay_batch() == (2, 2)
    assert [job.position for job in queue.claim_many(10)] == [2, 3]


def test_events_replay_of_an_unknown_queue_is_a_clear_error(
    backend: Backend, migrated: alkstore.Store
) -> None:
    migrated.subscribe("orders", ["*"])
    out = run(backend, "events", "replay", "--queue", "nope", "--from", "1")
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.strip() == "alkstore: no subscription for queue 'nope'"
    assert [s.checkpoint for s in migrated.subscriptions()] == [0]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--queue", "orders"], 2, "alkstore: events replay needs --queue and --from"),
        (["--from", "1"], 2, "alkstore: events replay needs --queue and --from"),
        (["--queue", "orders", "--from", "0"], 1, "alkstore: from_position must be >= 1, got 0"),
    ],
)
def test_events_replay_with_bad_arguments_is_a_clear_error(
    backend: Backend, migrated: alkstore.Store, args: list[str], code: int, message: str
) -> None:
    migrated.subscribe("orders", ["*"])
    out = run(backend, "events", "replay", *args)
    assert out.returncode == code
    assert out.stderr.strip() == message
    assert "Traceback" not in out.stderr


def test_status_before_migrate_is_a_clear_error(backend: Backend) -> None:
    out = run(backend, "status")
    assert out.returncode == 1
    assert out.stderr.startswith("alkstore: alkstore's tables are missing")
    assert "Traceback" not in out.stderr


def test_status_shows_an_open_writing_transaction(pg_backend: Backend) -> None:
    store = pg_backend.connect()
    try:
        store.migrate()
        store.subscribe("all", ["*"])
        with psycopg.connect(pg_backend.url) as conn:
            alkstore.append(conn, Written(writer=1, seq=0), namespace=pg_backend.namespace)
            pid = conn.info.backend_pid
            out = run(pg_backend, "status")
            conn.rollback()
    finally:
        store.close()
    assert out.returncode == 0, out.stderr
    holdups = [line for line in lines(out.stdout) if line.startswith("open writing transaction")]
    assert any(
        line.startswith(f"open writing transaction: pid {pid}, ")
        and "idle in transaction" in line
        and line.endswith("(its events appear when it commits)")
        for line in holdups
    ), out.stdout


def test_relay_runs_until_sigterm_and_stops_cleanly(
    backend: Backend, migrated: alkstore.Store, tmp_path: Path
) -> None:
    store = migrated
    store.subscribe("all", ["*"], start="beginning")
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
    args = ["--db", backend.url, "--namespace", backend.namespace, "--lease-ttl", "1"]
    relay = CliProcess("relay", args, tmp_path / "relay.log")
    try:
        deadline = time.monotonic() + 30
        job = None
        while job is None:
            assert relay.alive(), relay.output()
            assert time.monotonic() < deadline, relay.output()
            job = store.queue("all").claim()
            time.sleep(0.02)
        assert job.payload == OrderPlaced(order_id=1)
        assert relay.terminate() == 0, relay.output()
    finally:
        relay.close()
    output = relay.output()
    assert f"relay starting on {backend.name} (namespace {backend.namespace})" in output
    assert "relay is active (lease token 1)" in output
    assert "relay released the lease" in output
    assert "Traceback" not in output
    assert store.lease("relay", 1).acquire(), "the lease was not released"
