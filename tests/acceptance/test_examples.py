"""The examples run as a user runs them (examples/README.md): one command each, on the
embedded SQLite default and on PostgreSQL, and the order service's parts as processes of
their own. Each test checks what the example printed and what it left in the store."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.processes import CliProcess

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Place:
    """Where an example runs: its flags, and the store they lead to."""

    args: list[str]
    url: str
    namespace: str

    def store(self) -> alkstore.Store:
        return alkstore.connect(self.url, namespace=self.namespace)

    def env(self) -> dict[str, str]:
        """The environment of a part that takes no flags (uvicorn)."""
        return environment() | {"ALKSTORE_DB": self.url, "ALKSTORE_NAMESPACE": self.namespace}


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ALKSTORE_DB", "ALKSTORE_NAMESPACE")}
    return env | {"PYTHONPATH": str(ROOT)}


@pytest.fixture
def place(backend: Backend, tmp_path: Path) -> Iterator[Place]:
    """SQLite: no flags at all, the embedded default ./alkstore.db. PostgreSQL: a fresh
    namespace, and the application's tables in a schema of their own (search_path)."""
    if backend.name == "sqlite":
        yield Place([], f"sqlite:///{tmp_path / 'alkstore.db'}", "alkstore")
        return
    with pg_place(backend) as found:
        yield found


@contextmanager
def pg_place(backend: Backend) -> Iterator[Place]:
    """A PostgreSQL namespace, and the application's tables in a schema of their own."""
    schema = f"app_{backend.namespace}"
    with psycopg.connect(backend.url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{backend.url}?options=-csearch_path%3D{schema}"
    try:
        yield Place(["--db", url, "--namespace", backend.namespace], url, backend.namespace)
    finally:
        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=environment(), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def rows(store: alkstore.Store, query: str) -> list[tuple[object, ...]]:
    with store.transaction() as tx:
        return list(tx.connection.execute(query).fetchall())


def test_the_order_service_runs_in_one_command(place: Place, tmp_path: Path) -> None:
    started = time.monotonic()
    out = run(tmp_path, "-m", "examples.orders", *place.args).stdout
    assert time.monotonic() - started < 20, out

    # over HTTP: four orders placed, one declined
    assert re.search(r"POST /orders ada@example.com 1250 -> 201 \{'order_id': 1\}", out), out
    assert "POST /orders edsger@example.com 250000 -> 402" in out
    # a confirmation refused once, then sent; one refused on every attempt
    assert re.search(r"job confirmations#\d+ attempt 1: MailRejected: 451 greylisted", out)
    assert "sent to grace@greylist.example (attempt 2)" in out
    assert re.search(
        r"job confirmations#\d+ dead-lettered after attempt 3: "
        r"MailRejected: 550 mailbox unavailable: alan@bounce.example",
        out,
    )
    # the scheduled report, after the last order
    assert "sales report: 4 orders, 101.49 in total" in out
    assert "queue confirmations: ready 0, scheduled 0, active 0, dead 1" in out

    with place.store() as store:
        orders = rows(store, "SELECT email, total_cents FROM orders ORDER BY id")
        assert [tuple(r) for r in orders] == [
            ("ada@example.com", 1250),
            ("grace@greylist.example", 4999),
            ("alan@bounce.example", 800),
            ("barbara@example.com", 3100),
        ]
        types = [e.type for e in store.log.read(after=0, limit=1000)]
        assert types.count("orders.placed") == 4 and "orders.report_due" in types
        confirmations = store.queue("confirmations")
        stats = confirmations.stats()
        assert (stats.ready, stats.scheduled, stats.active, stats.dead) == (0, 0, 0, 1)
        (dead,) = confirmations.dead_letters()
        assert json.loads(dead.raw)["email"] == "alan@bounce.example"
        assert dead.reason == "MailRejected: 550 mailbox unavailable: alan@bounce.example"
        assert dead.attempts == 3 and [a.attempt for a in dead.history] == [1, 2, 3]
        reports = store.queue("reports").stats()
        assert (reports.ready, reports.active, reports.dead) == (0, 0, 0)

        # the operator's fix: correct the address, requeue the dead letter
        order_id = int(json.loads(dead.raw)["order_id"])
        with store.transaction() as tx:
            tx.connection.execute(
                f"UPDATE orders SET email = 'alan@example.com' WHERE id = {order_id}"
            )
        assert confirmations.requeue([dead.id]) == 1
    worker = run(
        tmp_path, "-m", "relay.cli", "worker", "examples.orders.worker:worker", "--once",
        "--queues", "confirmations", *place.args,
    )  # fmt: skip
    assert f"order {order_id} sent to alan@example.com (attempt 1)" in worker.stderr
    with place.store() as store:
        stats = store.queue("confirmations").stats()
        assert (stats.ready, stats.scheduled, stats.active, stats.dead) == (0, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str, body: dict[str, object]) -> int:
    request = urllib.request.Request(url, json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=5) as response:
        return int(json.loads(response.read())["order_id"])


def test_the_order_service_parts_run_as_processes(place: Place, tmp_path: Path) -> None:
    """setup; the HTTP API under uvicorn and `alkstore relay`; the health check while they
    run; `alkstore worker --once`; the health check once the relay is gone."""
    run(tmp_path, "-m", "examples.orders", "setup", *place.args)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "examples.orders.app:create_app",
         "--port", str(port)],
        cwd=tmp_path, env=place.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    relay = CliProcess("relay", ["--db", place.url, "--namespace", place.namespace],
                       tmp_path / "relay.log")  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                order = {"email": "a@example.com", "total_cents": 5}
                order_id = post(f"http://127.0.0.1:{port}/orders", order)
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline and server.poll() is None, "uvicorn died"
                time.sleep(0.1)
        with place.store() as store:
            while store.queue("confirmations").stats().ready < 1:  # the relay's job
                assert time.monotonic() < deadline and relay.alive(), relay.describe()
                time.sleep(0.05)
        healthy = run(tmp_path, "-m", "examples.healthcheck", *place.args)
        assert re.search(r"^ok   relay: \S+ holds the lease \(token \d+\)$", healthy.stdout, re.M)
        assert re.search(r"^ok   confirmations: 1 ready \(oldest \d+\.\ds\)", healthy.stdout, re.M)
    finally:
        server.terminate()
        server.wait(10)
        assert relay.terminate() == 0, relay.describe()
        relay.close()

    worker = run(
        tmp_path, "-m", "relay.cli", "worker", "examples.orders.worker:worker", "--once",
        "--queues", "confirmations", *place.args,
    )  # fmt: skip
    assert f"confirmation for order {order_id} sent to a@example.com (attempt 1)" in worker.stderr
    with place.store() as store:
        assert store.queue("confirmations").stats().ready == 0
        store.queue("audit").enqueue({"n": 1})  # a queue fed by enqueue, no subscription
    sick = subprocess.run(
        [sys.executable, "-m", "examples.healthcheck", "--max-wait", "0", "--queue", "audit",
         *place.args],
        cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert sick.returncode == 1, sick.stdout + sick.stderr
    assert "FAIL relay: no process holds the relay lease" in sick.stdout
    assert re.search(r"^FAIL audit: 1 ready \(oldest \d+\.\ds\)", sick.stdout, re.M)


def test_a_producer_appends_on_its_own_connection(place: Place, tmp_path: Path) -> None:
    out = run(tmp_path, "-m", "examples.producer", *place.args).stdout
    assert out.splitlines()[:3] == [
        "invoice 1 issued to acme",
        "rolled back, no row and no event: invoice 2: amount must be positive",
        f"invoice {2 if place.url.startswith('sqlite') else 3} issued to initech",
    ]
    assert "billing: 2 events for a relay to turn into jobs" in out
    with place.store() as store:
        entries = store.log.read(after=0, limit=100)
        assert [(e.type, e.key) for e in entries] == [
            ("invoices.issued", "invoice-1"),
            ("invoices.issued", f"invoice-{2 if store.engine.name == 'sqlite' else 3}"),
        ]
        invoices = rows(store, "SELECT customer, amount_cents FROM invoices ORDER BY id")
        assert [tuple(r) for r in invoices] == [("acme", 12000), ("initech", 4200)]
        assert store.relay_batch() == (2, 2)  # a relay turns them into jobs
        assert store.queue("billing").stats().ready == 2
