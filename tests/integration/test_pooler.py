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
from alkstore.postgres import _engine
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
