"""alkstore behind a real PgBouncer in transaction pooling mode (docs/adr/0020).

A pooler hands one server connection to many clients in turn, so nothing alkstore does
may stay on a session (a SET, a prepared statement, a LISTEN), and what needs a session
of its own (LISTEN) goes to a direct URL."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

import alkstore
from alkstore.postgres import _engine, _listen
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.pgbouncer import PgBouncer


def show(url: str, setting: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"SHOW {setting}").fetchone()
        assert row is not None
        return str(row[0])


def notified(listen: psycopg.Connection[tuple[object, ...]], timeout: float = 5.0) -> bool:
    return any(True for _ in listen.notifies(timeout=timeout, stop_after=1))


def test_alkstore_leaves_no_setting_on_sessions_other_clients_get(
    bouncer: PgBouncer, pg_backend: Backend
) -> None:
    """The `single` pool has one server connection: every client gets the session the
    notifier used. A commit must never be acknowledged before it is durable for them."""
    ns = pg_backend.namespace
    single = bouncer.url("single")
    assert show(single, "synchronous_commit") == "on"
    with psycopg.connect(pg_backend.url, autocommit=True) as listen:
        listen.execute(f"LISTEN __alkstore_{ns}")
        store = alkstore.connect(single, namespace=ns)
        try:
            store.migrate()
            for n in range(3):
                with store.transaction() as tx:
                    tx.append(OrderPlaced(order_id=n))
                assert notified(listen), "the notifier sent no NOTIFY"
                for _ in range(4):  # the next clients, one after another
                    assert show(single, "synchronous_commit") == "on"
                    assert show(single, "default_transaction_isolation") == "read committed"
        finally:
            store.close()


def test_the_pooler_is_detected(bouncer: PgBouncer, pg_backend: Backend) -> None:
    with alkstore.connect(bouncer.url(), namespace=pg_backend.namespace) as store:
        assert isinstance(store.engine, _engine.PostgresEngine)
        assert store.engine.pooler is True
    with alkstore.connect(pg_backend.url, namespace=pg_backend.namespace) as store:
        assert isinstance(store.engine, _engine.PostgresEngine)
        assert store.engine.pooler is False
    url = f"{pg_backend.url}?pooler=true"
    with alkstore.connect(url, namespace=pg_backend.namespace) as store:
        assert isinstance(store.engine, _engine.PostgresEngine)
        assert store.engine.pooler is True
    with alkstore.connect(pg_backend.url, namespace=pg_backend.namespace, pooler=True) as store:
        assert isinstance(store.engine, _engine.PostgresEngine)
        assert store.engine.pooler is True
    with pytest.raises(alkstore.InvalidURL, match="pooler"):
        alkstore.connect(f"{pg_backend.url}?pooler=maybe")


def test_every_operation_works_through_the_pooler(bouncer: PgBouncer, pg_backend: Backend) -> None:
    """Round-robin server connections: a statement prepared on one session is missing on
    the next. Each operation runs more often than psycopg's prepare threshold (5)."""
    ns = pg_backend.namespace
    with alkstore.connect(bouncer.url(), namespace=ns, pool_size=4) as store:
        store.migrate()
        store.subscribe("mail", ["test.*"], start="beginning")
        for n in range(60):
            with store.transaction() as tx:
                tx.connection.execute("SELECT %s::int", (n,))  # the application's statement
                tx.append(OrderPlaced(order_id=n), key=f"order-{n}")
                tx.enqueue("audit", {"n": n})
                if n % 10 == 0:
                    tx.enqueue("audit", {"n": n, "late": True}, delay=0.001, dedupe_key=f"k{n}")
        with store.transaction() as tx:
            tx.append_many([OrderPlaced(order_id=100 + n) for n in range(40)])  # one COPY
        audit = store.queue("audit")
        for n in range(10):
            audit.enqueue({"direct": n})
        audit.enqueue_many([{"bulk": n} for n in range(40)])  # COPY
        relayed = 0
        while True:
            made, covered = store.relay_batch(batch=7)
            relayed += made
            if not covered:
                break
        assert relayed == 100
        assert store.log.head() == 100
        assert [e.position for e in store.log.read(after=90, limit=5)] == [91, 92, 93, 94, 95]
        for _ in range(8):
            assert store.sweep().ran
        renewal = store.renewal()
        seen: list[int] = []
        try:
            for name in ("mail", "audit"):
                q = store.queue(name)
                time.sleep(0.01)  # the delayed ones are due
                while True:
                    jobs = q.claim_many(9, visibility=30)
                    if not jobs:
                        break
                    assert renewal.renew(jobs) == []
                    jobs[0].heartbeat(progress={"at": 1})
                    assert q.ack_many(jobs) == []
                    seen.extend(job.id for job in jobs)
                assert q.stats().ready == 0, name
            assert len(seen) == len(set(seen)) == 216
        finally:
            renewal.close()
        status = store.status()
        assert status.head == 100 and [lag.events for lag in status.subscriptions] == [0]


def test_wakes_arrive_through_the_direct_listen_url(
    bouncer: PgBouncer, pg_backend: Backend
) -> None:
    ns = pg_backend.namespace
    url = bouncer.url()
    with (
        alkstore.connect(url, namespace=ns, listen_url=pg_backend.url) as consumer,
        alkstore.connect(url, namespace=ns) as producer,
    ):
        consumer.migrate()
        listener = consumer.listen()
        listener.wait(1.0)  # the LISTEN thread's first wake
        while listener.wait(0.05):
            pass
        for n in range(3):
            start = time.monotonic()
            with producer.transaction() as tx:
                tx.append(OrderPlaced(order_id=n))
            assert listener.wait(2.0), "no wake through the direct LISTEN connection"
            assert time.monotonic() - start < 0.5
            while listener.wait(0.05):
                pass


def test_behind_a_pooler_without_a_listen_url_wakes_are_off_and_said_so(
    bouncer: PgBouncer, pg_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="alkstore.wake")
    with alkstore.connect(bouncer.url(), namespace=pg_backend.namespace) as store:
        store.migrate()
        listener = store.listen()
        listener.wait(0.5)
    [line] = [r.getMessage() for r in caplog.records if r.name == "alkstore.wake"]
    assert "PostgreSQL LISTEN is off" in line and "connection pooler" in line
    assert "listen_url=" in line and "--listen-db" in line and "ALKSTORE_LISTEN_DB" in line


def test_a_listen_that_receives_nothing_is_said_once(
    bouncer: PgBouncer,
    pg_backend: Backend,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pooler alkstore was told is not there (pooler=False): LISTEN goes through it and
    its own probe NOTIFY never comes back."""
    monkeypatch.setattr(_listen, "PROBE_WAIT", 0.5)
    caplog.set_level(logging.WARNING, logger="alkstore.wake")
    url = bouncer.url("probe")
    with alkstore.connect(url, namespace=pg_backend.namespace, pooler=False) as store:
        store.migrate()
        listener = store.listen()
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            listener.wait(0.1)
        time.sleep(0.6)
    [line] = [r.getMessage() for r in caplog.records if r.name == "alkstore.wake"]
    assert "received no notification within 0.5 s" in line
    assert "connection pooler" in line and "--listen-db" in line
