"""`alkstore --version`, `status --json`, `workers`, `subscriptions` and the retention flags
of `relay` and `worker`, as a user runs them (docs/adr/0018)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import alkstore
from tests.acceptance.test_cli_relay import run
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.processes import CliProcess


@pytest.fixture
def migrated(backend: Backend) -> Any:
    with backend.migrated() as store:
        yield store


@pytest.fixture
def lite(tmp_path: Path) -> Any:
    """An SQLite store: what the CLI prints is the same on both engines (the contract
    tests read the same data on each), and every command is a subprocess of ~1 s."""
    backend = Backend("sqlite", f"sqlite:///{tmp_path / 'cli.db'}", "live")
    with backend.migrated() as store:
        yield backend, store


def as_json(backend: Backend, *args: str) -> Any:
    out = run(backend, *args, "--json")
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    return json.loads(out.stdout)


def test_version() -> None:
    out = run(Backend("sqlite", "sqlite:///:memory:", "alkstore"), "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"alkstore {importlib.metadata.version('alkstore')}\n"


def test_status_json_counts_a_queue_fed_only_by_tx_enqueue(
    backend: Backend, migrated: alkstore.Store
) -> None:
    store = migrated
    with store.transaction() as tx:
        tx.enqueue("audit", {"n": 1})
        tx.enqueue("audit", {"n": 2}, max_attempts=1)
        tx.enqueue("audit", {"n": 3}, delay=3_600)
        tx.enqueue("audit", {"n": 4})
    running, dying = store.queue("audit").claim_many(2)
    dying.fail("boom")
    store.subscribe("orders", ["test.*"], start="beginning")
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))

    status = as_json(backend, "status")
    assert status["head"] == 1
    (lag,) = status["subscriptions"]
    assert list(lag) == ["queue", "checkpoint", "events", "seconds", "gap", "sink", "parked"]
    assert (lag["queue"], lag["checkpoint"], lag["events"]) == ("orders", 0, 1)
    audit, orders = status["queues"]
    assert {k: audit[k] for k in ("name", "ready", "scheduled", "running", "dead")} == {
        "name": "audit",
        "ready": 1,
        "scheduled": 1,
        "running": 1,
        "dead": 1,
    }
    assert audit["oldest_ready_age"] >= 0 and audit["paused"] is False
    assert (orders["name"], orders["ready"]) == ("orders", 0)
    assert [leader["role"] for leader in status["leaders"]] == ["relay", "scheduler", "sweeper"]
    assert status["retention"] == {
        "dead_letters": 14 * 86_400.0,
        "log": 7 * 86_400.0,
        "source": "default",
        "swept_by": None,
    }
    running.ack()


def test_workers_lists_live_and_dead_workers(lite: tuple[Backend, alkstore.Store]) -> None:
    backend, store = lite
    out = run(backend, "workers")
    assert (out.returncode, out.stdout) == (0, "workers: none\n"), out.stderr

    presence = store.worker_presence(["emails", "audit"], 8)
    (row,) = as_json(backend, "workers")
    assert row["id"] == presence.id
    assert (row["host"], row["pid"], row["queues"], row["concurrency"], row["alive"]) == (
        socket.gethostname(),
        os.getpid(),
        ["emails", "audit"],
        8,
        True,
    )
    assert row["started_at"].endswith("Z") or "+00:00" in row["started_at"]
    header, line = run(backend, "workers").stdout.splitlines()
    assert header.split("\t") == [
        "HOST",
        "PID",
        "QUEUES",
        "CONCURRENCY",
        "STARTED",
        "LAST SEEN",
        "STATE",
    ]
    fields = line.split("\t")
    assert fields[:4] == [socket.gethostname(), str(os.getpid()), "emails,audit", "8"]
    assert fields[5].endswith("s ago") and fields[6] == "live"
    status = run(backend, "status").stdout
    assert "workers: 1 live, 0 dead" in status
    presence.leave()
    assert as_json(backend, "workers") == []


def test_workers_json_carries_what_each_worker_has_done(
    lite: tuple[Backend, alkstore.Store],
) -> None:
    """The row's counts per queue (docs/adr/0023, addendum) are a key of `workers --json`
    (null for a row written without counts); the text stays as it was."""
    backend, store = lite
    counts = {"emails": {"done": 12, "retried": 1, "dead": 0}}
    counted = store.worker_presence(["emails"], 2, lambda: counts)
    try:
        (row,) = as_json(backend, "workers")
        assert row["counts"] == counts
        header = run(backend, "workers").stdout.splitlines()[0]
        assert header.split("\t")[-1] == "STATE"
        (status_row,) = as_json(backend, "status")["workers"]
        assert status_row["counts"] == counts
    finally:
        counted.leave()
    plain = store.worker_presence(["audit"], 1)
    try:
        assert [r["counts"] for r in as_json(backend, "workers")] == [None]
    finally:
        plain.leave()


UNKEYED = {"dedupe_by_key": False, "replace_by_key": False, "debounce_by_key": None}


def test_subscriptions_add_list_remove(lite: tuple[Backend, alkstore.Store]) -> None:
    backend, migrated = lite
    out = run(backend, "subscriptions", "list")
    assert (out.returncode, out.stdout) == (0, "subscriptions: none\n")
    with migrated.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
    out = run(backend, "subscriptions", "add", "emails", "test.*", "billing.*")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "subscribed emails to test.*,billing.* after position 1\n"
    added = as_json(backend, "subscriptions", "add", "all", "*", "--start", "beginning")
    assert added == {"queue": "all", "events": ["*"], "checkpoint": 0, "gap": None, **UNKEYED}
    out = run(backend, "subscriptions", "add", "emails", "test.*")
    assert out.stdout == "updated emails: test.* (checkpoint kept at 1)\n"
    assert as_json(backend, "subscriptions", "list") == [
        {"queue": "all", "events": ["*"], "checkpoint": 0, "gap": None, **UNKEYED},
        {"queue": "emails", "events": ["test.*"], "checkpoint": 1, "gap": None, **UNKEYED},
    ]
    assert run(backend, "subscriptions", "list").stdout == (
        "all\t*\tcheckpoint 0\nemails\ttest.*\tcheckpoint 1\n"
    )
    out = run(backend, "subscriptions", "remove", "emails")
    assert out.stdout == "removed the subscription of emails (its jobs stay)\n"
    assert [s.queue for s in migrated.subscriptions()] == ["all"]


def test_subscriptions_add_with_replace_and_debounce(lite: tuple[Backend, alkstore.Store]) -> None:
    """The keyed options of `subscribe` (docs/adr/0022) from the command line; re-adding
    without one turns it off, as `subscribe` does."""
    backend, store = lite
    for queue, flags in (
        ("latest", ["--replace-by-key"]),
        ("quiet", ["--debounce-by-key", "30"]),
        ("first", ["--dedupe-by-key"]),
    ):
        out = run(backend, "subscriptions", "add", queue, "test.*", *flags)
        assert out.returncode == 0, out.stderr
    assert run(backend, "subscriptions", "list").stdout == (  # as they were added
        "first\ttest.*\tcheckpoint 0\t--dedupe-by-key\n"
        "latest\ttest.*\tcheckpoint 0\t--replace-by-key\n"
        "quiet\ttest.*\tcheckpoint 0\t--debounce-by-key 30\n"
    )
    listed = {s["queue"]: s for s in as_json(backend, "subscriptions", "list")}
    assert {
        q: (s["dedupe_by_key"], s["replace_by_key"], s["debounce_by_key"])
        for q, s in listed.items()
    } == {
        "first": (True, False, None),
        "latest": (False, True, None),
        "quiet": (False, False, 30.0),
    }
    with store.transaction() as tx:
        for n in (1, 2):
            tx.append(OrderPlaced(order_id=n), key="order-1")
    store.relay_batch()
    latest, quiet, first = (store.queue(q).jobs() for q in ("latest", "quiet", "first"))
    assert [(j.raw_payload["order_id"], j.state) for j in latest] == [(2, "ready")]
    assert [(j.raw_payload["order_id"], j.state) for j in quiet] == [(2, "scheduled")]
    assert [(j.raw_payload["order_id"], j.state) for j in first] == [(1, "ready")]
    assert run(backend, "subscriptions", "add", "latest", "test.*").returncode == 0
    [latest_now] = [s for s in store.subscriptions() if s.queue == "latest"]
    assert (latest_now.replace_by_key, latest_now.debounce_by_key) == (False, None)
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=3), key="order-1")
    store.relay_batch()
    assert len(store.queue("latest").jobs()) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["subscriptions", "remove", "nope"], "alkstore: no subscription for queue 'nope'"),
        (
            ["subscriptions", "add", "q", "*", "--replace-by-key", "--dedupe-by-key"],
            "alkstore: argument --dedupe-by-key: not allowed with argument --replace-by-key",
        ),
        (
            ["subscriptions", "add", "q", "*", "--debounce-by-key", "-1"],
            "alkstore: debounce_by_key must be >= 0",
        ),
        (
            ["subscriptions", "add", "q"],
            'alkstore: subscriptions add needs event patterns, e.g. "order.*"',
        ),
        (["subscriptions", "add"], "alkstore: subscriptions add needs a QUEUE"),
        (["subscriptions", "add", "q", "*", "--start", "soon"], "alkstore: --start must be"),
        (
            ["subscriptions", "add", "q", "*", "--start", "99"],
            "alkstore: cannot subscribe 'q' from",
        ),
        (["subscriptions", "add", "q", "a b"], "alkstore: invalid event pattern 'a b'"),
        (["relay", "--retention", "7x"], "alkstore: argument --retention: must be a duration"),
        (["worker", "m:w", "--dead-retention", "-1"], "alkstore: argument --dead-retention"),
    ],
)
def test_mistakes_are_one_line(
    lite: tuple[Backend, alkstore.Store], args: list[str], message: str
) -> None:
    out = run(lite[0], *args)
    assert out.returncode in (1, 2) and out.stdout == ""
    assert out.stderr.startswith(message), out.stderr
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr


def wait_for_sweep(backend: Backend) -> Any:
    deadline = time.monotonic() + 30
    while (retention := as_json(backend, "status")["retention"])["source"] != "sweep":
        assert time.monotonic() < deadline, "no sweep recorded"
        time.sleep(0.1)
    return retention


def test_relay_and_worker_retention_flags(
    lite: tuple[Backend, alkstore.Store], tmp_path: Path
) -> None:
    backend = lite[0]
    flags = ["--db", backend.url, "--namespace", backend.namespace]
    relay = CliProcess(
        "relay", [*flags, "--lease-ttl", "1", "--retention", "0", "--dead-retention", "36h"],
        tmp_path / "relay.log",
    )  # fmt: skip
    try:
        retention = wait_for_sweep(backend)
        assert relay.terminate() == 0, relay.output()
    finally:
        relay.close()
    assert (retention["dead_letters"], retention["log"]) == (36 * 3_600.0, None)
    by = f"{socket.gethostname()}:{relay.pid}"
    assert retention["swept_by"] == by

    worker = run(  # --once on an empty queue: it still sweeps once
        backend, "worker", "tests.acceptance.edge_worker:worker", "--once",
        "--retention", "2d", "--dead-retention", "0",
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    retention = as_json(backend, "status")["retention"]
    assert (retention["dead_letters"], retention["log"]) == (None, 2 * 86_400.0)
    assert retention["swept_by"] != by
    assert as_json(backend, "workers") == [], "a worker that stopped cleanly has no row"
