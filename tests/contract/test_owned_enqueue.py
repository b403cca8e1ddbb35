"""`alkstore.enqueue(conn, ...)` on a connection the application owns (apsw, psycopg):
the job joins the caller's transaction, on both engines (docs/adr/0024)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


class Boom(Exception):
    pass


@pytest.fixture
def conn(store: alkstore.Store, backend: Backend) -> Iterator[Any]:
    """The application's own connection (apsw, or psycopg not in autocommit)."""
    c = backend.raw_connection()
    try:
        yield c
    finally:
        c.close()


def block(conn: Any) -> AbstractContextManager[Any]:
    """A transaction on the caller's connection; nested, a savepoint (both drivers)."""
    return conn.transaction() if isinstance(conn, psycopg.Connection) else conn


def waiting(store: alkstore.Store, queue: str) -> list[tuple[int, Any]]:
    """The queue's live jobs: (id, payload)."""
    return [(j.id, json.loads(j.raw)) for j in store.queue(queue).jobs()]


def test_the_job_commits_with_the_business_write(
    store: alkstore.Store, backend: Backend, conn: Any
) -> None:
    ns = backend.namespace
    table = "orders" if backend.name == "sqlite" else f"{ns}.orders"  # dropped with ns
    with block(conn):
        conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY)")
    with block(conn):
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        job_id = alkstore.enqueue(conn, "email", {"order": 1}, namespace=ns)
        assert isinstance(job_id, int)
    assert waiting(store, "email") == [(job_id, {"order": 1})]
    job = store.queue("email").claim()
    assert job is not None and job.id == job_id and job.payload == {"order": 1}


def test_rollback_exception_and_savepoint_take_the_job_away(
    store: alkstore.Store, backend: Backend, conn: Any
) -> None:
    ns = backend.namespace
    with pytest.raises(Boom), block(conn):
        alkstore.enqueue(conn, "email", "raised", namespace=ns)
        raise Boom
    with block(conn):
        kept = alkstore.enqueue(conn, "email", "kept", namespace=ns)
        with pytest.raises(Boom), block(conn):  # a savepoint
            alkstore.enqueue(conn, "email", "in the savepoint", namespace=ns)
            raise Boom
    if backend.name == "sqlite":
        conn.execute("BEGIN")
        alkstore.enqueue(conn, "email", "rolled back", namespace=ns)
        conn.execute("ROLLBACK")
    else:
        conn.execute("SELECT 1")  # not autocommit: psycopg opened a transaction
        alkstore.enqueue(conn, "email", "rolled back", namespace=ns)
        conn.rollback()
    assert waiting(store, "email") == [(kept, "kept")]


def test_without_a_transaction_it_is_refused_and_nothing_is_written(
    store: alkstore.Store, backend: Backend
) -> None:
    if backend.name == "sqlite":
        conn = backend.raw_connection()
    else:
        conn = psycopg.connect(backend.url, autocommit=True)
    try:
        with pytest.raises(alkstore.NotInTransaction, match=r"alkstore\.enqueue"):
            alkstore.enqueue(conn, "email", 1, namespace=backend.namespace)
    finally:
        conn.close()
    assert waiting(store, "email") == []


def test_options_and_a_duplicate_do_not_abort_the_transaction(
    store: alkstore.Store, backend: Backend, conn: Any
) -> None:
    ns = backend.namespace
    with block(conn):
        first = alkstore.enqueue(conn, "email", 1, namespace=ns, dedupe_key="d", priority=5)
        with pytest.raises(alkstore.DuplicateJob):
            alkstore.enqueue(conn, "email", 2, namespace=ns, dedupe_key="d")
        ignored = alkstore.enqueue(
            conn, "email", 3, namespace=ns, dedupe_key="d", on_duplicate="ignore"
        )
        later = alkstore.enqueue(conn, "email", 4, namespace=ns, delay=3600)
    assert ignored is None
    jobs = {j.id: j for j in store.queue("email").jobs()}
    assert set(jobs) == {first, later}
    assert (jobs[first].priority, jobs[first].dedupe_key, jobs[first].state) == (5, "d", "ready")
    assert jobs[later].state == "scheduled"


def test_bad_input_is_refused_before_anything_is_sent(
    store: alkstore.Store, backend: Backend, conn: Any
) -> None:
    ns = backend.namespace
    with block(conn):
        with pytest.raises(alkstore.InvalidPayload):
            alkstore.enqueue(conn, "email", {"n": float("nan")}, namespace=ns)
        with pytest.raises(alkstore.PayloadTooLarge):
            alkstore.enqueue(conn, "email", "x" * 100, namespace=ns, max_payload_bytes=50)
        with pytest.raises(alkstore.InvalidName):
            alkstore.enqueue(conn, " bad", 1, namespace=ns)
        with pytest.raises(alkstore.InvalidArgument):
            alkstore.enqueue(conn, "email", 1, namespace=ns, on_duplicate="skip")  # type: ignore[call-overload]
        with pytest.raises(TypeError):
            alkstore.enqueue(conn, "email", 1, namespace=ns, colour="red")
        alkstore.enqueue(conn, "email", "still usable", namespace=ns)
    assert [raw for _, raw in waiting(store, "email")] == ["still usable"]


def test_an_unmigrated_namespace_is_not_migrated(backend: Backend, conn: Any) -> None:
    with block(conn), pytest.raises(alkstore.NotMigrated):
        alkstore.enqueue(conn, "email", 1, namespace="t_never_migrated")


def test_connections_alkstore_cannot_join_are_a_typed_error(store: alkstore.Store) -> None:
    """The standard library's sqlite3 and unknown objects: UnsupportedConnection (a
    TypeError too), raised before anything is written anywhere."""
    lite: Any = sqlite3.connect(":memory:")  # Any: the overloads refuse it statically too
    try:
        lite.execute("BEGIN")
        with pytest.raises(alkstore.UnsupportedConnection, match=r"sqlite3.*apsw"):
            alkstore.enqueue(lite, "email", 1)
        with pytest.raises(alkstore.UnsupportedConnection, match=r"sqlite3.*apsw"):
            alkstore.append(lite, OrderPlaced(order_id=1))
    finally:
        lite.close()
    with pytest.raises(alkstore.UnsupportedConnection) as info:
        alkstore.enqueue(object(), "email", 1)  # type: ignore[call-overload]
    assert isinstance(info.value, TypeError)
    assert waiting(store, "email") == []


def test_the_commit_wakes_a_listener_of_a_store_in_this_process(
    store: alkstore.Store, backend: Backend, conn: Any
) -> None:
    """SQLite: the data_version watcher sees the commit; PostgreSQL: the store's
    notifier watches the caller's connection and NOTIFYs once it commits."""
    listener = store.listen()
    listener.wait(1.0)  # a fresh PostgreSQL listener fires once connected
    while listener.wait(0.05):
        pass
    with block(conn):
        alkstore.enqueue(conn, "email", 1, namespace=backend.namespace)
    started = time.monotonic()
    assert listener.wait(5.0), "no wake within 5 s of the commit"
    assert time.monotonic() - started < 1.0  # a generous bound the re-poll alone would miss


def test_without_a_namespace_the_environments_is_used_as_connect_uses_it(
    store: alkstore.Store, backend: Backend, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`alkstore.connect()` takes $ALKSTORE_NAMESPACE when no namespace is given; so do
    `alkstore.enqueue` and `alkstore.append` on the application's connection, or a
    process configured by the environment would write where its relay never reads."""
    monkeypatch.setenv("ALKSTORE_NAMESPACE", backend.namespace)
    with block(conn):
        job_id = alkstore.enqueue(conn, "email", {"order": 2})
        alkstore.append(conn, OrderPlaced(order_id=2), key="o2")
    assert waiting(store, "email") == [(job_id, {"order": 2})]
    assert [(e.key, e.type) for e in store.log.read()] == [("o2", "test.order_placed")]
