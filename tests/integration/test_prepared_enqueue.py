"""`q.enqueue` on PostgreSQL runs a statement prepared on libpq, not a psycopg execute.

The statement lives in the pooled connection's session. These tests pin what
must hold around it: it is really used, it survives the application
deallocating statements (seen or unseen), a terminated connection is a typed
error that loses nothing committed and leaves the next enqueue working, and an
unmigrated namespace is `NotMigrated` (alkstore/postgres/_prepared.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import alkstore
from tests.conftest import Backend


@pytest.fixture
def pg_store(pg_backend: Backend) -> Iterator[alkstore.Store]:
    # the pool hands out the connection used last: the tests below reach it
    with pg_backend.migrated(pool_size=2) as store:
        yield store


def statement_name(store: alkstore.Store) -> str:
    return f"_alkstore_enqueue_{store.namespace}"


def session(store: alkstore.Store) -> tuple[int, set[str]]:
    """The backend pid of the pool's next connection and the statements prepared there."""
    with store.transaction() as tx:
        pid = tx.connection.execute("SELECT pg_backend_pid()").fetchone()
        names = tx.connection.execute("SELECT name FROM pg_prepared_statements").fetchall()
    assert pid is not None
    return pid[0], {name for (name,) in names}


def payloads(store: alkstore.Store, queue: str) -> list[object]:
    """Every job's payload, in enqueue order."""
    return [job.payload for job in store.queue(queue).claim_many(100)]


def test_enqueue_runs_its_prepared_statement_on_the_pooled_connection(
    pg_store: alkstore.Store,
) -> None:
    q = pg_store.queue("prepared")
    first = q.enqueue({"n": 1})
    pid, names = session(pg_store)
    assert statement_name(pg_store) in names
    second = q.enqueue({"n": 2})
    assert session(pg_store) == (pid, names), "a second enqueue prepared again or moved"
    assert second > first
    assert payloads(pg_store, "prepared") == [{"n": 1}, {"n": 2}]


def test_enqueue_after_the_application_deallocated_everything(pg_store: alkstore.Store) -> None:
    q = pg_store.queue("dealloc")
    q.enqueue(1)
    with pg_store.transaction() as tx:
        tx.connection.execute("DEALLOCATE ALL")  # psycopg reports it: we prepare again
    q.enqueue(2)
    assert statement_name(pg_store) in session(pg_store)[1]
    assert payloads(pg_store, "dealloc") == [1, 2]


def test_enqueue_prepares_again_when_its_statement_vanished_unseen(
    pg_store: alkstore.Store,
) -> None:
    q = pg_store.queue("unseen")
    q.enqueue(1)
    with pg_store.transaction() as tx:
        # straight to libpq: nothing in alkstore or psycopg sees this statement
        result = tx.connection.pgconn.exec_(b"DEALLOCATE ALL")
        assert result.status == psycopg.pq.ExecStatus.COMMAND_OK
    assert statement_name(pg_store) not in session(pg_store)[1]
    q.enqueue(2)  # "prepared statement does not exist": prepared again, run once
    assert statement_name(pg_store) in session(pg_store)[1]
    assert payloads(pg_store, "unseen") == [1, 2]


def test_a_terminated_connection_is_a_storage_error_and_the_next_enqueue_works(
    pg_store: alkstore.Store, pg_backend: Backend
) -> None:
    q = pg_store.queue("terminated")
    q.enqueue(1)
    pid, _ = session(pg_store)
    with psycopg.connect(pg_backend.url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(alkstore.StorageError):
        q.enqueue(2)  # on the dead connection: not written
    q.enqueue(3)  # the pool dropped it
    assert session(pg_store)[0] != pid
    assert payloads(pg_store, "terminated") == [1, 3]


def test_enqueue_on_an_unmigrated_namespace_is_not_migrated(pg_backend: Backend) -> None:
    store = pg_backend.connect()
    try:
        with pytest.raises(alkstore.NotMigrated):
            store.queue("nowhere").enqueue(1)
    finally:
        store.close()
