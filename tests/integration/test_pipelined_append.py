"""`tx.append` on PostgreSQL sends its INSERT without waiting for the reply.

The reply is read with COMMIT's, or by the next use of the connection (which
first settles and leaves pipeline mode). These tests pin what the application
can observe: statement order, where errors surface, atomicity when the INSERT
itself fails, and a pool connection that comes back clean (docs/adr/0010).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import pq

import alkstore
from tests.conftest import Backend
from tests.events import Written


class Boom(Exception):
    pass


@pytest.fixture
def pg_store(pg_backend: Backend) -> Iterator[alkstore.Store]:
    store = pg_backend.connect(pool_size=2)
    try:
        store.migrate()
        with store.transaction() as tx:
            tx.connection.execute(
                f"CREATE TABLE {pg_backend.namespace}_orders (id int PRIMARY KEY)"
            )
        yield store
    finally:
        with store.transaction() as tx:
            tx.connection.execute(f"DROP TABLE IF EXISTS {pg_backend.namespace}_orders")
        store.close()


def orders(store: alkstore.Store) -> list[int]:
    with store.transaction() as tx:
        rows = tx.connection.execute(f"SELECT id FROM {store.namespace}_orders ORDER BY id")
        return [row[0] for row in rows]


def seqs(store: alkstore.Store) -> list[int]:
    events = [entry.payload for entry in store.log.read(limit=1000)]
    assert all(isinstance(event, Written) for event in events)
    return [event.seq for event in events if isinstance(event, Written)]


def in_pipeline(conn: psycopg.Connection[object]) -> bool:
    return conn.pgconn.pipeline_status != pq.PipelineStatus.OFF


def test_the_insert_is_in_flight_until_commit(pg_store: alkstore.Store) -> None:
    with pg_store.transaction() as tx:
        tx.connection.execute(f"INSERT INTO {pg_store.namespace}_orders VALUES (1)")
        assert not in_pipeline(tx.connection)
        tx.append(Written(writer=1, seq=1))
        tx.append_many([Written(writer=1, seq=2), Written(writer=1, seq=3)])
        assert in_pipeline(tx.connection), "appends wait for COMMIT's round trip"
    assert not in_pipeline(tx.connection)
    assert seqs(pg_store) == [1, 2, 3]
    assert orders(pg_store) == [1]


def test_the_next_statement_sees_the_event_and_runs_outside_pipeline_mode(
    pg_store: alkstore.Store,
) -> None:
    ns = pg_store.namespace
    with pg_store.transaction() as tx:
        cursor = tx.connection.cursor()  # created before the append, used after
        tx.append(Written(writer=1, seq=1))
        row = cursor.execute(f"SELECT count(*) FROM {ns}.events").fetchone()
        assert row == (1,)
        assert not in_pipeline(tx.connection)
        tx.append(Written(writer=1, seq=2))
        assert tx.connection.execute(f"SELECT count(*) FROM {ns}.events").fetchone() == (2,)
        tx.append(Written(writer=1, seq=3))
        streamed = list(cursor.stream(f"SELECT count(*) FROM {ns}.events"))
        assert streamed == [(3,)]
        tx.append(Written(writer=1, seq=4))
        with tx.connection.cursor(name="named") as named:  # server cursors too
            named.execute(f"SELECT count(*) FROM {ns}.events")
            assert named.fetchone() == (4,)
        tx.append(Written(writer=1, seq=5))
        with cursor.copy(f"COPY {ns}_orders (id) FROM STDIN") as copy:
            copy.write_row((7,))
        tx.append(Written(writer=1, seq=6))
        with tx.connection.pipeline():  # the application's own pipeline
            tx.connection.execute(f"INSERT INTO {ns}_orders VALUES (8)")
            tx.append(Written(writer=1, seq=7))  # queued in it, through psycopg
        assert tx.connection.execute(f"SELECT count(*) FROM {ns}.events").fetchone() == (7,)
    assert seqs(pg_store) == [1, 2, 3, 4, 5, 6, 7]
    assert orders(pg_store) == [7, 8]


def test_errors_of_later_statements_surface_at_those_statements(pg_store: alkstore.Store) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero), pg_store.transaction() as tx:
        tx.append(Written(writer=1, seq=1))
        try:
            tx.connection.execute("SELECT 1 / 0")
        except psycopg.errors.DivisionByZero:
            raised_at_statement = True
            raise
    assert raised_at_statement
    assert seqs(pg_store) == []


def test_a_rolled_back_savepoint_takes_the_events_sent_inside_it(
    pg_store: alkstore.Store,
) -> None:
    with pg_store.transaction() as tx:
        tx.append(Written(writer=1, seq=1))
        with pytest.raises(Boom), tx.connection.transaction():
            tx.append(Written(writer=1, seq=2))
            raise Boom
        with tx.connection.transaction():
            tx.append(Written(writer=1, seq=3))
        with pytest.raises(Boom), tx.connection.transaction():
            tx.connection.execute(f"INSERT INTO {pg_store.namespace}_orders VALUES (1)")
            tx.append(Written(writer=1, seq=4))
            raise Boom
        tx.append(Written(writer=1, seq=5))
    assert seqs(pg_store) == [1, 3, 5]
    assert orders(pg_store) == []


def test_an_exception_rolls_back_events_in_flight(pg_store: alkstore.Store) -> None:
    with pytest.raises(Boom), pg_store.transaction() as tx:
        tx.connection.execute(f"INSERT INTO {pg_store.namespace}_orders VALUES (1)")
        tx.append(Written(writer=1, seq=1))
        raise Boom
    assert seqs(pg_store) == []
    assert orders(pg_store) == []
    with pg_store.transaction() as tx:  # the pooled connection is fine
        tx.append(Written(writer=1, seq=2))
    assert seqs(pg_store) == [2]


def test_a_failing_insert_fails_the_commit_and_the_business_write(
    pg_backend: Backend, pg_store: alkstore.Store
) -> None:
    """The INSERT's reply comes with COMMIT's: its error is the commit's error,
    and the business row written before it is rolled back with it."""
    ns = pg_backend.namespace
    with pg_store.transaction() as tx:
        tx.connection.execute(f"DROP TABLE {ns}.events CASCADE")  # simulate an unmigrated store
    with pytest.raises(alkstore.NotMigrated), pg_store.transaction() as tx:
        tx.connection.execute(f"INSERT INTO {ns}_orders VALUES (1)")
        tx.append(Written(writer=1, seq=1))
    assert orders(pg_store) == []

    reached = []
    with pytest.raises(alkstore.NotMigrated), pg_store.transaction() as tx:
        tx.connection.execute(f"INSERT INTO {ns}_orders VALUES (2)")
        tx.append(Written(writer=1, seq=2))
        reached.append("append")
        tx.connection.execute("SELECT 1")  # reads the INSERT's reply first: raises here
        reached.append("select")
    assert reached == ["append"]
    assert orders(pg_store) == []
    with pg_store.transaction() as tx:  # the pool still hands out a working connection
        tx.connection.execute(f"INSERT INTO {ns}_orders VALUES (3)")
    assert orders(pg_store) == [3]


def prepared_names(conn: psycopg.Connection[object]) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements")}  # type: ignore[index]


def test_a_drop_in_the_applications_pipeline(pg_store: alkstore.Store) -> None:
    """A DROP's tag comes back after the statement inside a pipeline; psycopg drops
    its prepared statements then, so the event INSERT is prepared again after it."""
    ns = pg_store.namespace
    with pg_store.transaction() as tx:
        tx.append(Written(writer=1, seq=1))
        tx.connection.execute("SELECT 1", prepare=True)  # psycopg now has a statement
        with tx.connection.pipeline():
            tx.connection.execute(f"CREATE TABLE {ns}.scratch ()")
            tx.connection.execute(f"DROP TABLE {ns}.scratch")
        tx.connection.execute("SELECT 2")  # psycopg sends its DEALLOCATE ALL around here
        tx.append(Written(writer=1, seq=2))
    assert seqs(pg_store) == [1, 2]


@pytest.mark.parametrize(
    "drop_all",
    ["savepoint rollback", "DEALLOCATE ALL", "DROP", "store rollback"],
)
def test_appends_survive_psycopg_dropping_every_prepared_statement(
    pg_store: alkstore.Store, drop_all: str
) -> None:
    """psycopg runs DEALLOCATE ALL after a rollback or DROP when it has prepared
    statements of its own; the INSERT is prepared again in the next pipeline."""
    ns = pg_store.namespace
    with pg_store.transaction() as tx:
        tx.append(Written(writer=1, seq=1))
        tx.connection.execute("SELECT 1", prepare=True)  # psycopg now has a statement
        names = prepared_names(tx.connection)
        assert f"_alkstore_append_{ns}" in names and len(names) >= 2
        if drop_all == "savepoint rollback":
            with pytest.raises(Boom), tx.connection.transaction():
                raise Boom
        elif drop_all == "DEALLOCATE ALL":
            tx.connection.execute("DEALLOCATE ALL")
        elif drop_all == "DROP":
            tx.connection.execute(f"CREATE TABLE {ns}.scratch ()")
            tx.connection.execute(f"DROP TABLE {ns}.scratch")
    if drop_all == "store rollback":
        with pytest.raises(Boom), pg_store.transaction() as tx:
            tx.append(Written(writer=1, seq=99))
            raise Boom
    with pg_store.transaction() as tx:
        if drop_all != "DEALLOCATE ALL":  # the user's own DEALLOCATE ALL clears psycopg's too
            assert f"_alkstore_append_{ns}" not in prepared_names(tx.connection)
        tx.append(Written(writer=1, seq=2))
        tx.append(Written(writer=1, seq=3))
    assert seqs(pg_store) == [1, 2, 3]


def test_an_event_insert_failing_inside_a_savepoint_fails_only_the_savepoint(
    pg_backend: Backend, pg_store: alkstore.Store
) -> None:
    ns = pg_backend.namespace
    with pg_store.transaction() as tx:
        tx.connection.execute(f"INSERT INTO {ns}_orders VALUES (1)")
        tx.append(Written(writer=1, seq=1))
        tx.connection.execute(
            f"ALTER TABLE {ns}.events ADD CONSTRAINT small CHECK (id < 0) NOT VALID"
        )
        with pytest.raises(alkstore.StorageError, match="small"), tx.connection.transaction():
            tx.append(Written(writer=1, seq=2))  # violates the check: fails at the savepoint's end
        tx.connection.execute(f"ALTER TABLE {ns}.events DROP CONSTRAINT small")
        tx.append(Written(writer=1, seq=3))
    assert seqs(pg_store) == [1, 3]
    assert orders(pg_store) == [1]


def test_commit_and_rollback_are_the_store_transactions_own(pg_store: alkstore.Store) -> None:
    with pg_store.transaction() as tx:
        tx.append(Written(writer=1, seq=1))
        with pytest.raises(psycopg.ProgrammingError, match=r"store\.transaction"):
            tx.connection.commit()
        with pytest.raises(psycopg.ProgrammingError, match=r"store\.transaction"):
            tx.connection.rollback()
    assert seqs(pg_store) == [1]


def test_a_backend_killed_with_events_in_flight_fails_the_commit_not_the_pool(
    pg_backend: Backend, pg_store: alkstore.Store
) -> None:
    with pytest.raises(alkstore.StorageError), pg_store.transaction() as tx:
        tx.connection.execute(f"INSERT INTO {pg_backend.namespace}_orders VALUES (1)")
        tx.append(Written(writer=1, seq=1))
        with psycopg.connect(pg_backend.url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (tx.connection.info.backend_pid,))
    with pg_store.transaction() as tx:  # a fresh connection
        tx.append(Written(writer=1, seq=2))
    assert seqs(pg_store) == [2]
    assert orders(pg_store) == []


def test_a_transaction_aborted_by_a_caught_error_does_not_report_a_commit(
    pg_store: alkstore.Store,
) -> None:
    """PostgreSQL answers COMMIT of a failed transaction with ROLLBACK, no error;
    store.transaction() raises instead of returning as if it had committed."""
    ns = pg_store.namespace
    with pytest.raises(alkstore.StorageError, match="rolled back"), pg_store.transaction() as tx:
        tx.connection.execute(f"INSERT INTO {ns}_orders VALUES (1)")
        with pytest.raises(psycopg.errors.DivisionByZero):
            tx.connection.execute("SELECT 1 / 0")  # caught, no savepoint: aborts the tx
    with pytest.raises(alkstore.StorageError, match="aborted"), pg_store.transaction() as tx:
        with pytest.raises(psycopg.errors.DivisionByZero):
            tx.connection.execute("SELECT 1 / 0")
        tx.append(Written(writer=1, seq=1))  # its INSERT fails: the transaction is aborted
    assert orders(pg_store) == []
    assert seqs(pg_store) == []


# No user DEALLOCATE ALL here: psycopg 3.3 notices only the first one on a connection
# and then fails its own prepared statements (a psycopg bug, with or without
# alkstore); test_appends_survive_psycopg_dropping_every_prepared_statement covers ours.
# Nor a DROP inside the application's pipeline: psycopg 3.3's own prepared
# statements break after that too; test_a_drop_in_the_applications_pipeline covers ours.
SIMPLE_OPS = ["append", "append_many", "select", "prepared_select", "drop", "pipeline_select"]
savepoint = st.tuples(
    st.just("savepoint"), st.lists(st.sampled_from(SIMPLE_OPS), max_size=4), st.booleans()
)
transaction = st.tuples(
    st.lists(st.one_of(st.sampled_from(SIMPLE_OPS), savepoint), max_size=8), st.booleans()
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(transactions=st.lists(transaction, min_size=1, max_size=4))
def test_random_transactions_match_a_model(
    pg_store: alkstore.Store, transactions: list[tuple[list[Any], bool]]
) -> None:
    """Any mix of appends, the application's statements, savepoints that commit or
    roll back, and everything that makes psycopg drop prepared statements: the log
    holds exactly the events of committed transactions outside rolled-back savepoints."""
    ns = pg_store.namespace
    before = pg_store.log.head()
    seq = iter(range(1_000_000))
    expected: list[int] = []

    def run(tx: alkstore.Transaction, op: str, into: list[int]) -> None:
        conn = tx.connection
        if op == "append":
            into.append(next(seq))
            tx.append(Written(writer=0, seq=into[-1]))
        elif op == "append_many":
            batch = [next(seq) for _ in range(3)]
            into.extend(batch)
            tx.append_many([Written(writer=0, seq=s) for s in batch])
        elif op == "select":
            assert conn.execute("SELECT 1").fetchone() == (1,)
        elif op == "prepared_select":
            assert conn.execute("SELECT 2", prepare=True).fetchone() == (2,)
        elif op == "drop":
            conn.execute(f"CREATE TABLE {ns}.scratch ()")
            conn.execute(f"DROP TABLE {ns}.scratch")
        elif op == "pipeline_select":  # the application's own pipeline
            with conn.pipeline():
                conn.execute("SELECT 1")
                conn.execute("SELECT 3")

    for ops, commit in transactions:
        pending: list[int] = []
        try:
            with pg_store.transaction() as tx:
                for op in ops:
                    if isinstance(op, tuple):
                        _, inner, keep = op
                        inside: list[int] = []
                        try:
                            with tx.connection.transaction():
                                for inner_op in inner:
                                    run(tx, inner_op, inside)
                                if not keep:
                                    raise Boom
                        except Boom:
                            continue
                        pending.extend(inside)
                    else:
                        run(tx, op, pending)
                if not commit:
                    raise Boom
        except Boom:
            continue
        expected.extend(pending)
    entries = pg_store.log.read(after=before, limit=10_000)
    assert [e.payload.seq for e in entries if isinstance(e.payload, Written)] == expected
    assert len(entries) == len(expected)


def test_sockets_numbered_past_1024_work(pg_backend: Backend) -> None:
    """select() cannot wait on descriptors >= 1024; an application with many open
    files must still be able to append."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2048), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        store = pg_backend.connect(pool_size=2)
        try:
            store.migrate()
            with store.transaction() as tx:
                assert tx.connection.fileno() >= 1024
                tx.append(Written(writer=1, seq=1))
            assert seqs(store) == [1]
        finally:
            store.close()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
