"""Appending in transactions and reading the log: the same behaviour on both engines."""

from __future__ import annotations

from datetime import datetime

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.events import Basket, OrderPlaced


class Boom(Exception):
    pass


def test_append_commits_with_the_business_write(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1, total_cents=999), key="order-1", headers={"a": "b"})
        tx.append_many([OrderPlaced(order_id=2), OrderPlaced(order_id=3)], key="batch")
    entries = store.log.read()
    assert [e.payload for e in entries] == [
        OrderPlaced(order_id=1, total_cents=999),
        OrderPlaced(order_id=2),
        OrderPlaced(order_id=3),
    ]
    assert [e.position for e in entries] == [1, 2, 3]
    assert [e.key for e in entries] == ["order-1", "batch", "batch"]
    assert entries[0].headers == {"a": "b"} and entries[1].headers == {}
    assert all(e.type == "test.order_placed" for e in entries)
    assert all(isinstance(e.appended_at, datetime) and e.appended_at.tzinfo for e in entries)
    assert store.log.head() == 3


def test_read_pages_by_position(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=i) for i in range(10)])
    first = store.log.read(after=0, limit=4)
    rest = store.log.read(after=first[-1].position, limit=100)
    assert [e.payload.order_id for e in first + rest] == list(range(10))  # type: ignore[attr-defined]
    assert store.log.read(after=store.log.head()) == []


def test_rollback_leaves_no_trace(store: alkstore.Store) -> None:
    with pytest.raises(Boom), store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
        raise Boom
    assert store.log.read() == []
    assert store.log.head() == 0
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=2))
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=2)]


def test_business_write_and_event_are_atomic(store: alkstore.Store, backend: Backend) -> None:
    with store.transaction() as tx:
        tx.connection.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
    with pytest.raises(Boom), store.transaction() as tx:
        tx.connection.execute("INSERT INTO orders (id) VALUES (1)")
        tx.append(OrderPlaced(order_id=1))
        raise Boom
    with store.transaction() as tx:
        tx.connection.execute("INSERT INTO orders (id) VALUES (2)")
        tx.append(OrderPlaced(order_id=2))
        rows = list(tx.connection.execute("SELECT id FROM orders"))
    assert [tuple(r) for r in rows] == [(2,)]
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=2)]


def test_caller_owned_connection_commit_and_rollback(
    store: alkstore.Store, backend: Backend
) -> None:
    conn = backend.raw_connection()
    ns = backend.namespace
    try:
        if backend.name == "sqlite":
            conn.execute("BEGIN")
            alkstore.append(conn, OrderPlaced(order_id=1), namespace=ns)
            conn.execute("ROLLBACK")
            with conn:  # apsw: a savepoint transaction, committed at exit
                alkstore.append(conn, OrderPlaced(order_id=2), key="k", namespace=ns)
        else:
            conn.execute("SELECT 1")  # not autocommit: psycopg opened a transaction
            alkstore.append(conn, OrderPlaced(order_id=1), namespace=ns)
            conn.rollback()
            with conn.transaction():
                alkstore.append(conn, OrderPlaced(order_id=2), key="k", namespace=ns)
    finally:
        conn.close()
    entries = store.log.read()
    assert [(e.payload, e.key) for e in entries] == [(OrderPlaced(order_id=2), "k")]


def test_caller_owned_connection_without_transaction_is_refused(
    store: alkstore.Store, backend: Backend
) -> None:
    if backend.name == "sqlite":
        conn = backend.raw_connection()
    else:
        conn = psycopg.connect(backend.url, autocommit=True)
    try:
        with pytest.raises(alkstore.NotInTransaction):
            alkstore.append(conn, OrderPlaced(order_id=1), namespace=backend.namespace)
    finally:
        conn.close()
    assert store.log.read() == []


def test_unmigrated_namespace_is_a_typed_error(backend: Backend) -> None:
    s = backend.connect()
    try:
        with pytest.raises(alkstore.NotMigrated):
            s.log.read()
        with pytest.raises(alkstore.NotMigrated), s.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))
    finally:
        s.close()


def test_payload_decoding_errors_carry_the_path(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        tx.append(Basket(items=[1, 2]))
        if store.engine.name == "sqlite":
            tx.connection.execute(
                f'UPDATE {store.namespace}__events SET payload = \'{{"items": [1, "x"]}}\''
            )
        else:
            tx.connection.execute(
                f'UPDATE {store.namespace}.events SET payload = \'{{"items": [1, "x"]}}\''
            )
    (entry,) = store.log.read()
    with pytest.raises(alkstore.InvalidPayload, match=r"\$\.items\[1\]") as info:
        entry.payload  # noqa: B018
    assert info.value.type_name == "test.basket"


def test_unknown_event_type_on_read(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
        table = (
            f"{store.namespace}__events"
            if store.engine.name == "sqlite"
            else (f"{store.namespace}.events")
        )
        tx.connection.execute(f"UPDATE {table} SET type = 'nobody.knows'")
    (entry,) = store.log.read()
    assert entry.type == "nobody.knows"  # raw access works without the class
    with pytest.raises(alkstore.UnknownEventType) as info:
        entry.payload  # noqa: B018
    assert info.value.type_name == "nobody.knows"


def test_a_failing_commit_is_a_storage_error_and_nothing_is_kept(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        tx.connection.execute("CREATE TABLE parents (id INTEGER PRIMARY KEY)")
        tx.connection.execute(
            "CREATE TABLE children (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parents (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
    with pytest.raises(alkstore.StorageError), store.transaction() as tx:
        tx.connection.execute("INSERT INTO children VALUES (1, 99)")  # checked at COMMIT
        tx.append(OrderPlaced(order_id=1))
    assert store.log.read() == []
    with store.transaction() as tx:  # the connection is usable again
        tx.append(OrderPlaced(order_id=2))
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=2)]


def test_caller_owned_connection_on_a_busy_database_is_a_retryable_error(
    store: alkstore.Store, backend: Backend
) -> None:
    """Another transaction holds the lock the append needs: DatabaseBusy (a StorageError
    that says "retry"), not a bare StorageError; the same append succeeds once it is gone."""
    ns = backend.namespace
    holder, conn = backend.raw_connection(), backend.raw_connection()
    try:
        if backend.name == "sqlite":
            holder.execute("BEGIN IMMEDIATE")  # the write lock
            conn.set_busy_timeout(200)  # the application's wait for it, as lock_timeout below
            conn.execute("BEGIN")
        else:
            holder.execute(f"LOCK TABLE {ns}.events IN ACCESS EXCLUSIVE MODE")
            conn.execute("SET lock_timeout = '200ms'")
        with pytest.raises(alkstore.DatabaseBusy) as info:
            alkstore.append(conn, OrderPlaced(order_id=1), namespace=ns)
        assert isinstance(info.value, alkstore.StorageError)
        assert "retry" in str(info.value)
        conn.execute("ROLLBACK") if backend.name == "sqlite" else conn.rollback()
        holder.execute("ROLLBACK") if backend.name == "sqlite" else holder.rollback()
        if backend.name == "sqlite":  # the retry
            with conn:
                alkstore.append(conn, OrderPlaced(order_id=1), namespace=ns)
        else:
            with conn.transaction():
                alkstore.append(conn, OrderPlaced(order_id=1), namespace=ns)
    finally:
        holder.close()
        conn.close()
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=1)]
