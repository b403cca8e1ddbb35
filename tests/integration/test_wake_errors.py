"""PostgreSQL wake sources (ADR 0005) when their connection fails: the notifier and the
listener log the failure at WARNING with its cause (at most one line a minute while it
keeps failing) and the recovery at INFO, and commits still wake listeners."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest

import alkstore
from alkstore.postgres import _notify
from tests.conftest import Backend
from tests.events import OrderPlaced


def settle(listener: alkstore.Listener) -> None:
    listener.wait(1.0)
    while listener.wait(0.05):
        pass


def wake_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "alkstore.wake" and r.levelno == level
    ]


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def backends(admin: psycopg.Connection[tuple[int]], app: str, query: str) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s AND query LIKE %s",
        (app, query),
    ).fetchall()
    return [pid for (pid,) in rows]


def test_a_notifier_that_cannot_connect_warns_once_with_the_cause(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore.wake")
    base, _, _ = pg_url.rpartition("/")
    conninfo = f"{base}/alkstore_no_such_database"
    closed = threading.Event()
    notifier = _notify.Notifier(conninfo, "SELECT pg_notify('x', '')", closed, ("t",))
    try:
        for _ in range(5):
            notifier.committed()
            wait_for(lambda: wake_records(caplog, logging.WARNING))
            time.sleep(0.05)
    finally:
        notifier.stop(5)
    [warning] = wake_records(caplog, logging.WARNING)  # one line, not one per commit
    assert warning.startswith("PostgreSQL NOTIFY failed")
    assert 'database "alkstore_no_such_database" does not exist' in warning
    assert "listeners re-poll" in warning


def test_a_terminated_notifier_connection_is_logged_and_replaced(
    pg_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore.wake")
    app = f"alk_wake_{pg_backend.namespace}"
    writer = alkstore.connect(
        f"{pg_backend.url}?application_name={app}", namespace=pg_backend.namespace
    )
    writer.migrate()
    admin = psycopg.connect(pg_backend.url, autocommit=True)
    try:
        with writer.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))
        wait_for(lambda: backends(admin, app, "SELECT pg_notify%"))
        [pid] = backends(admin, app, "SELECT pg_notify%")
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.1)
        with writer.transaction() as tx:
            tx.append(OrderPlaced(order_id=2))
        wait_for(lambda: wake_records(caplog, logging.INFO))
    finally:
        admin.close()
        writer.close()
    [warning] = wake_records(caplog, logging.WARNING)
    assert warning.startswith("PostgreSQL NOTIFY failed: "), warning
    assert "server closed the connection unexpectedly" in warning, warning
    assert wake_records(caplog, logging.INFO) == ["PostgreSQL NOTIFY works again (1 failure)"]


def test_a_terminated_listen_connection_is_logged_and_listening_resumes(
    pg_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore.wake")
    app = f"alk_listen_{pg_backend.namespace}"
    reader = alkstore.connect(
        f"{pg_backend.url}?application_name={app}", namespace=pg_backend.namespace
    )
    reader.migrate()
    writer = pg_backend.connect()
    admin = psycopg.connect(pg_backend.url, autocommit=True)
    try:
        listener = reader.listen()
        settle(listener)
        [pid] = backends(admin, app, "LISTEN %")
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for(lambda: wake_records(caplog, logging.INFO))
        [warning] = wake_records(caplog, logging.WARNING)
        assert warning.startswith("PostgreSQL LISTEN failed: OperationalError: "), warning
        assert "server closed the connection unexpectedly" in warning, warning
        assert "reconnecting in" in warning and "consumers re-poll meanwhile" in warning
        settle(listener)
        with writer.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))
        assert listener.wait(5), "no wake after the listener reconnected"
    finally:
        admin.close()
        writer.close()
        reader.close()
