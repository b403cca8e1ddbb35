"""`tx.enqueue` on PostgreSQL runs q.enqueue's prepared statement inside the transaction.

The job INSERT goes to libpq (not a psycopg execute) and joins the pipeline of
events still in flight; its reply, the job id, is read at the call. These tests
pin that the statement is used, that it survives the application's statements
that make psycopg deallocate everything, that a duplicate dedupe key raises at
the call and leaves the transaction usable, and that a rollback leaves no job
(alkstore/postgres/_conn.py `run_prepared_in`, docs/adr/0010).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import alkstore
from alkstore.postgres import _conn
from tests.conftest import Backend
from tests.events import OrderPlaced


@pytest.fixture
def pg_store(pg_backend: Backend) -> Iterator[alkstore.Store]:
    with pg_backend.migrated(pool_size=2) as store:
        yield store


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every psycopg execute on alkstore's pooled connections."""
    seen: list[str] = []
    original = _conn.Cursor.execute

    def spy(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(query))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(_conn.Cursor, "execute", spy)
    return seen


def payloads(store: alkstore.Store, queue: str) -> list[object]:
    return [job.payload for job in store.queue(queue).claim_many(100)]


def statement(store: alkstore.Store, query: str = "enqueue") -> str:
    return f"_alkstore_{query}_{store.namespace}"


def prepared(tx: alkstore.Transaction) -> set[str]:
    rows = tx.connection.execute("SELECT name FROM pg_prepared_statements").fetchall()
    return {name for (name,) in rows}


def test_tx_enqueue_runs_the_prepared_statement_not_a_psycopg_execute(
    pg_store: alkstore.Store, executed: list[str]
) -> None:
    with pg_store.transaction() as tx:
        first = tx.enqueue("tx", {"n": 1})
        second = tx.enqueue("tx", {"n": 2}, dedupe_key="two")
        assert not [q for q in executed if "INSERT" in q], "the job INSERT went through psycopg"
        assert {statement(pg_store), statement(pg_store, "enqueue_dedupe")} <= prepared(tx)
    assert second > first
    assert payloads(pg_store, "tx") == [{"n": 1}, {"n": 2}]


def test_tx_enqueue_reads_the_replies_of_events_in_flight(pg_store: alkstore.Store) -> None:
    with pg_store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
        job = tx.enqueue("tx", 1)
        conn = tx.connection
        assert isinstance(conn, _conn.Connection)
        assert not conn.pgconn.pipeline_status, "the event's reply came with the job's"
        count = f"SELECT count(*) FROM {pg_store.namespace}.events"
        assert tx.connection.execute(count).fetchone() == (1,)
    assert pg_store.log.read()[0].type == "test.order_placed"
    assert job > 0 and payloads(pg_store, "tx") == [1]


@pytest.mark.parametrize("drop_all", ["DEALLOCATE ALL", "savepoint rollback", "DROP"])
def test_tx_enqueue_survives_the_application_dropping_every_prepared_statement(
    pg_store: alkstore.Store, drop_all: str
) -> None:
    with pg_store.transaction() as tx:
        tx.enqueue("tx", 1)
        conn = tx.connection
        if drop_all == "DEALLOCATE ALL":
            conn.execute("DEALLOCATE ALL")
        elif drop_all == "DROP":
            conn.execute("CREATE TABLE scratch (id int)")
            conn.execute("DROP TABLE scratch")
        else:
            conn.execute("SELECT 1", prepare=True)  # psycopg now deallocates on rollback
            with pytest.raises(ZeroDivisionError), conn.transaction():
                tx.enqueue("tx", "rolled back")
                raise ZeroDivisionError
        assert statement(pg_store) not in prepared(tx) or drop_all == "DROP"
        tx.enqueue("tx", 2)
        assert statement(pg_store) in prepared(tx)
    assert payloads(pg_store, "tx") == [1, 2]


def test_a_duplicate_inside_a_transaction_raises_at_the_call_and_the_transaction_goes_on(
    pg_store: alkstore.Store,
) -> None:
    with pg_store.transaction() as tx:
        tx.enqueue("tx", 1, dedupe_key="k")
        tx.append(OrderPlaced(order_id=2))  # in flight when the duplicate is sent
        with pytest.raises(alkstore.DuplicateJob):
            tx.enqueue("tx", "dup", dedupe_key="k")
        assert tx.enqueue("tx", "ignored", dedupe_key="k", on_duplicate="ignore") is None
        tx.enqueue("tx", 3)
    assert payloads(pg_store, "tx") == [1, 3]
    assert [e.type for e in pg_store.log.read()] == ["test.order_placed"]


def test_a_rollback_leaves_no_job(pg_store: alkstore.Store) -> None:
    with pytest.raises(ZeroDivisionError), pg_store.transaction() as tx:
        tx.enqueue("tx", 1)
        raise ZeroDivisionError
    assert payloads(pg_store, "tx") == []
    with pg_store.transaction() as tx:  # the connection went back to the pool clean
        tx.enqueue("tx", 2)
    assert payloads(pg_store, "tx") == [2]


def test_an_unseen_deallocation_fails_that_transaction_and_not_the_next(
    pg_store: alkstore.Store,
) -> None:
    """No second try inside a transaction: the error aborted it (ADR 0010 addendum)."""
    with pg_store.transaction() as tx:
        tx.enqueue("tx", 1)
    with pytest.raises(alkstore.StorageError, match="26000"), pg_store.transaction() as tx:
        tx.connection.pgconn.exec_(b"DEALLOCATE ALL")  # nothing in alkstore sees it
        tx.enqueue("tx", 2)
    with pg_store.transaction() as tx:
        tx.enqueue("tx", 3)
    assert payloads(pg_store, "tx") == [1, 3]


def test_inside_the_applications_pipeline_tx_enqueue_uses_psycopg(
    pg_store: alkstore.Store, executed: list[str]
) -> None:
    with pg_store.transaction() as tx, tx.connection.pipeline():
        tx.enqueue("tx", 1)
    assert [q for q in executed if "INSERT" in q]
    assert payloads(pg_store, "tx") == [1]


def test_tx_enqueue_on_an_unmigrated_namespace_is_not_migrated(pg_backend: Backend) -> None:
    store = pg_backend.connect()
    try:
        with pytest.raises(alkstore.NotMigrated), store.transaction() as tx:
            tx.enqueue("nowhere", 1)
    finally:
        store.close()


def test_the_pool_connection_is_not_left_in_pipeline_mode(pg_store: alkstore.Store) -> None:
    with pg_store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
        tx.enqueue("tx", 1)
        tx.append(OrderPlaced(order_id=2))
    with pg_store.transaction() as tx:
        conn = tx.connection
        assert isinstance(conn, psycopg.Connection)
        assert not conn.pgconn.pipeline_status
        assert conn.execute(f"SELECT count(*) FROM {pg_store.namespace}.events").fetchone() == (2,)
