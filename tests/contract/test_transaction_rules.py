"""What may run inside `store.transaction()`: the same rule on both engines (docs/adr/0016).

Inside the block, on its thread, the store is used through `tx` (tx.append, tx.enqueue,
tx.connection). Any other call of the same store that touches its tables would run in
a transaction of its own: on PostgreSQL on another pooled connection, committing on
its own (a job that outlives the business rollback) or waiting forever for a lock the
open transaction holds; on SQLite on the same connection, where it cannot begin. So it
raises TransactionOpen, at once, on both engines. Other threads are not concerned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced

DEADLINE = 20.0  # seconds a threaded scenario may take before the test calls it a hang


class Boom(Exception):
    pass


def _in_thread(target: Callable[[], None], backend: Backend) -> None:
    """Run `target` in a thread; fail (and unblock the database) if it does not end."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    if thread.is_alive():
        if backend.name == "postgres":  # end the lock wait, so teardown does not hang too
            with psycopg.connect(backend.url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            thread.join(DEADLINE)
        pytest.fail(f"hung for {DEADLINE:g}s (a lock wait on the open transaction)")
    if errors:
        raise errors[0]


# -- the calls that are refused ------------------------------------------------------

CALLS: dict[str, Callable[[alkstore.Store], Any]] = {
    "queue.enqueue": lambda s: s.queue("mail").enqueue({"to": "x"}),
    "queue.enqueue_many": lambda s: s.queue("mail").enqueue_many([{"to": "x"}] * 3),
    "queue.claim": lambda s: s.queue("mail").claim(),
    "queue.stats": lambda s: s.queue("mail").stats(),
    "transaction": lambda s: s.transaction().__enter__(),
    "subscribe": lambda s: s.subscribe("mail", ["order.*"]),
    "log.read": lambda s: s.log.read(),
    "log.head": lambda s: s.log.head(),
    "status": lambda s: s.status(),
    "relay_batch": lambda s: s.relay_batch(),
    "schedules.list": lambda s: s.schedules.list(),
    "sweep": lambda s: s.sweep(),
    "migrate": lambda s: s.migrate(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_other_calls_of_the_store_inside_its_transaction_are_refused(
    store: alkstore.Store, call: str
) -> None:
    with pytest.raises(Boom), store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
        with pytest.raises(alkstore.TransactionOpen, match=r"tx\.enqueue"):
            CALLS[call](store)
        raise Boom  # the business rollback
    assert store.queue("mail").stats().ready == 0, "nothing committed on its own"
    assert store.log.read() == []
    assert store.subscriptions() == []


def test_the_transaction_goes_on_after_a_refused_call(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        with pytest.raises(alkstore.TransactionOpen):
            store.queue("mail").enqueue({"to": "outside"})
        with pytest.raises(alkstore.TransactionOpen), store.transaction():
            pass
        tx.enqueue("mail", {"to": "inside"})
        tx.append(OrderPlaced(order_id=1))
    job = store.queue("mail").claim()
    assert job is not None and job.payload == {"to": "inside"}
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=1)]


def test_the_same_dedupe_key_inside_and_outside_is_an_error_not_a_deadlock(
    store: alkstore.Store, backend: Backend
) -> None:
    """PostgreSQL ran the outer enqueue on another connection, where it waited for the
    open transaction's key to commit, while the transaction waited for it: forever."""

    def scenario() -> None:
        with store.transaction() as tx:
            tx.enqueue("mail", {"n": 1}, dedupe_key="k")
            with pytest.raises(alkstore.TransactionOpen):
                store.queue("mail").enqueue({"n": 2}, dedupe_key="k")

    _in_thread(scenario, backend)
    job = store.queue("mail").claim()
    assert job is not None and job.payload == {"n": 1}
    assert store.queue("mail").claim() is None


def test_other_threads_use_the_store_while_a_transaction_is_open(
    store: alkstore.Store, backend: Backend
) -> None:
    """The rule is per thread: another thread's enqueue runs (SQLite: once the writer
    commits; PostgreSQL: at once)."""
    inside = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with store.transaction() as tx:
            tx.enqueue("mail", {"n": 1})
            inside.set()
            release.wait(DEADLINE)

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    assert inside.wait(DEADLINE)

    def other() -> None:
        if backend.name == "postgres":
            store.queue("mail").enqueue({"n": 2})  # its own transaction, not blocked
        release.set()
        store.queue("mail").enqueue({"n": 3})

    _in_thread(other, backend)
    thread.join(DEADLINE)
    payloads = [job.payload["n"] for job in store.queue("mail").claim_many(10)]
    assert sorted(payloads) == ([1, 2, 3] if backend.name == "postgres" else [1, 3])


# -- why SQLite begins with BEGIN IMMEDIATE -------------------------------------------


@pytest.mark.parametrize("connection", ["new", "warm"])
def test_transactions_that_read_then_write_concurrently_both_commit(
    store: alkstore.Store, backend: Backend, connection: str
) -> None:
    """Two store transactions each read a table, then write; the second reads before
    the first writes. Both commit. SQLite's BEGIN IMMEDIATE takes the write lock at
    BEGIN, so the second waits there; with a deferred BEGIN both would read, and the
    second's read-to-write upgrade would fail at once (SQLITE_BUSY: its snapshot is
    older than the first's commit), with no busy handler able to help.
    `connection`: the thread's first transaction (it opens the thread's connection) or
    one on a connection already open (SQLite's hot path)."""
    table = f"{backend.namespace}_notes"
    with store.transaction() as tx:
        tx.connection.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY)")
    first_read, second_read, first_done = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        if connection == "warm":
            store.now()
        with store.transaction() as tx:
            tx.connection.execute(f"SELECT count(*) FROM {table}").fetchall()
            first_read.set()
            second_read.wait(0.5)  # SQLite (immediate): the second waits in BEGIN
            tx.connection.execute(f"INSERT INTO {table} (id) VALUES (1)")
            tx.append(OrderPlaced(order_id=1))
        first_done.set()

    def second() -> None:
        if connection == "warm":
            store.now()
        assert first_read.wait(DEADLINE)
        with store.transaction() as tx:
            tx.connection.execute(f"SELECT count(*) FROM {table}").fetchall()
            second_read.set()
            assert first_done.wait(DEADLINE)
            tx.connection.execute(f"INSERT INTO {table} (id) VALUES (2)")
            tx.append(OrderPlaced(order_id=2))

    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                errors.append(exc)
                first_done.set()

        return run

    threads = [threading.Thread(target=guarded(t), daemon=True) for t in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    with store.transaction() as tx:
        rows = tx.connection.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()
        tx.connection.execute(f"DROP TABLE {table}")
    assert [tuple(row) for row in rows] == [(1,), (2,)]
    assert sorted(e.payload.order_id for e in store.log.read()) == [1, 2]  # type: ignore[attr-defined]
