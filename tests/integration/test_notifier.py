"""The notifier (ADR 0005): one coalesced NOTIFY after commits, sent from its own
connection, which it replaces when the server drops it."""

from __future__ import annotations

import time

import psycopg

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


def settle(listener: alkstore.Listener) -> None:
    listener.wait(1.0)
    while listener.wait(0.05):
        pass


def notifier_backends(admin: psycopg.Connection[tuple[int]], app: str) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s AND query LIKE 'SELECT pg_notify%%'",
        (app,),
    ).fetchall()
    return [pid for (pid,) in rows]


def test_a_commit_wakes_listeners_after_the_notifier_connection_was_terminated(
    pg_backend: Backend,
) -> None:
    app = f"alk_notifier_{pg_backend.namespace}"
    url = f"{pg_backend.url}?application_name={app}"
    writer = alkstore.connect(url, namespace=pg_backend.namespace)
    reader = pg_backend.connect()
    reader.migrate()
    admin = psycopg.connect(pg_backend.url, autocommit=True)
    try:
        listener = reader.listen()
        settle(listener)
        with writer.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))
        assert listener.wait(5.0), "no wake for the first commit"

        deadline = time.monotonic() + 5.0
        while not (pids := notifier_backends(admin, app)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(pids) == 1, pids
        admin.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        time.sleep(0.1)  # past the notifier's gap, so the next commit is announced alone
        settle(listener)

        with writer.transaction() as tx:
            tx.append(OrderPlaced(order_id=2))
        assert listener.wait(5.0), "the commit after the notifier's connection died woke nobody"
        assert [e.payload for e in reader.log.read()] == [
            OrderPlaced(order_id=1),
            OrderPlaced(order_id=2),
        ]
        assert len(notifier_backends(admin, app)) == 1  # reconnected
    finally:
        admin.close()
        writer.close()
        reader.close()
