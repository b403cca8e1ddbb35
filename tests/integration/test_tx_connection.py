"""`tx.connection` on PostgreSQL: every way the application uses it works after `tx.append`.

`tx.append` leaves its INSERT in flight in libpq's pipeline mode (docs/adr/0010).
The connection's own cursors settled it before running; a cursor made by hand
(`psycopg.Cursor(tx.connection)`, `ClientCursor`, `RawCursor`, `ServerCursor`)
did not: it sent its query into the pipeline and waited for a reply that never
came, holding the transaction's locks, or (simple protocol) raised a raw psycopg
error. Every psycopg operation on the connection now settles first, and one that
did not go through alkstore's cursors makes the INSERT be prepared again.
Each scenario runs in a thread with a deadline: a hang fails the test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import alkstore
from tests.conftest import Backend
from tests.events import Written

DEADLINE = 15.0  # seconds a scenario may take before the test calls it a hang


@pytest.fixture
def pg_store(pg_backend: Backend) -> Iterator[alkstore.Store]:
    store = pg_backend.connect(pool_size=2)
    try:
        store.migrate()
        with store.transaction() as tx:
            tx.connection.execute(f"CREATE TABLE {pg_backend.namespace}_notes (id int)")
        yield store
    finally:
        with store.transaction() as tx:
            tx.connection.execute(f"DROP TABLE IF EXISTS {pg_backend.namespace}_notes")
        store.close()


def bounded(backend: Backend, scenario: Callable[[], None]) -> None:
    """Run `scenario` in a thread; a hang ends its backends and fails the test."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            scenario()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    if thread.is_alive():
        with psycopg.connect(backend.url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        thread.join(DEADLINE)
        pytest.fail(f"hung for {DEADLINE:g}s with the transaction's locks held")
    if errors:
        raise errors[0]


def seqs(store: alkstore.Store) -> list[int]:
    return [e.payload.seq for e in store.log.read(limit=1000)]  # type: ignore[attr-defined]


CURSORS: dict[str, Callable[[Any], Any]] = {
    "psycopg.Cursor": psycopg.Cursor,
    "psycopg.ClientCursor": psycopg.ClientCursor,
    "psycopg.RawCursor": psycopg.RawCursor,
    "conn.cursor()": lambda conn: conn.cursor(),
}


@pytest.mark.parametrize("kind", sorted(CURSORS))
def test_a_cursor_made_by_hand_after_an_append(
    pg_backend: Backend, pg_store: alkstore.Store, kind: str
) -> None:
    ns = pg_backend.namespace

    def scenario() -> None:
        with pg_store.transaction() as tx:
            tx.append(Written(writer=1, seq=1))
            cursor = CURSORS[kind](tx.connection)
            mark = "$1" if kind == "psycopg.RawCursor" else "%s"
            cursor.execute(f"SELECT count(*) + {mark} FROM {ns}.events", (10,))
            assert cursor.fetchone() == (11,)
            tx.append(Written(writer=1, seq=2))
            cursor.execute(f"SELECT count(*) FROM {ns}.events")
            assert cursor.fetchone() == (2,)
            tx.append(Written(writer=1, seq=3))
            cursor.execute(f"INSERT INTO {ns}_notes VALUES (1)")
            tx.append(Written(writer=1, seq=4))
            cursor.executemany(f"INSERT INTO {ns}_notes VALUES (2)", [()] * 2)
            tx.append(Written(writer=1, seq=5))
            streaming = CURSORS[kind](tx.connection)  # made after the append: see below
            assert list(streaming.stream(f"SELECT count(*) FROM {ns}.events")) == [(5,)]
            tx.append(Written(writer=1, seq=6))
            with cursor.copy(f"COPY {ns}_notes (id) FROM STDIN") as copy:
                copy.write_row((3,))
            tx.append(Written(writer=1, seq=7))

    bounded(pg_backend, scenario)
    assert seqs(pg_store) == [1, 2, 3, 4, 5, 6, 7]
    with pg_store.transaction() as tx:
        notes = tx.connection.execute(f"SELECT id FROM {ns}_notes ORDER BY id").fetchall()
    assert notes == [(1,), (2,), (2,), (3,)]


def test_a_server_cursor_made_by_hand_after_an_append(
    pg_backend: Backend, pg_store: alkstore.Store
) -> None:
    ns = pg_backend.namespace

    def scenario() -> None:
        with pg_store.transaction() as tx:
            tx.append(Written(writer=1, seq=1))
            with psycopg.ServerCursor(tx.connection, "by_hand") as cursor:
                cursor.execute(f"SELECT count(*) FROM {ns}.events")
                assert cursor.fetchall() == [(1,)]
            tx.append(Written(writer=1, seq=2))

    bounded(pg_backend, scenario)
    assert seqs(pg_store) == [1, 2]


@pytest.mark.parametrize("statement", ["DEALLOCATE ALL", "savepoint rollback"])
def test_a_cursor_made_by_hand_that_drops_prepared_statements(
    pg_backend: Backend, pg_store: alkstore.Store, statement: str
) -> None:
    """A statement that drops every prepared statement (the application's DEALLOCATE
    ALL; psycopg's own after a ROLLBACK TO SAVEPOINT) run on a cursor alkstore does not
    see: the next append prepares its INSERT again."""

    def scenario() -> None:
        with pg_store.transaction() as tx:
            tx.append(Written(writer=1, seq=1))
            tx.connection.execute("SELECT 1", prepare=True)  # psycopg has a statement
            cursor = psycopg.Cursor(tx.connection)
            if statement == "DEALLOCATE ALL":
                cursor.execute("DEALLOCATE ALL")
            else:
                cursor.execute("SAVEPOINT by_hand")
                tx.append(Written(writer=1, seq=99))
                cursor.execute("ROLLBACK TO SAVEPOINT by_hand")
            tx.append(Written(writer=1, seq=2))
            tx.append(Written(writer=1, seq=3))

    bounded(pg_backend, scenario)
    assert seqs(pg_store) == [1, 2, 3]


@pytest.mark.parametrize("use", ["stream", "server cursor"])
def test_psycopgs_own_pipeline_checks_refuse_a_cursor_made_by_hand_before_an_append(
    pg_backend: Backend, pg_store: alkstore.Store, use: str
) -> None:
    """The one thing that does not work, and fails at once (docs/adr/0016): psycopg checks
    for pipeline mode itself before `stream()` and a server cursor's `execute()` reach
    the connection, so a cursor made by hand *before* an append cannot stream or declare
    after it. Made after the append, or by `tx.connection.cursor()`, it can."""
    ns = pg_backend.namespace

    def scenario() -> None:
        with pg_store.transaction() as tx:
            if use == "stream":
                cursor: Any = psycopg.Cursor(tx.connection)
                tx.append(Written(writer=1, seq=1))
                with pytest.raises(psycopg.ProgrammingError, match="pipeline mode"):
                    list(cursor.stream(f"SELECT count(*) FROM {ns}.events"))
                mine = tx.connection.cursor()
                tx.append(Written(writer=1, seq=2))
                assert list(mine.stream(f"SELECT count(*) FROM {ns}.events")) == [(2,)]
            else:
                cursor = psycopg.ServerCursor(tx.connection, "early")
                tx.append(Written(writer=1, seq=1))
                with pytest.raises(psycopg.NotSupportedError, match="pipeline mode"):
                    cursor.execute(f"SELECT count(*) FROM {ns}.events")
                cursor.close()
                with tx.connection.cursor(name="mine") as mine:
                    tx.append(Written(writer=1, seq=2))
                    mine.execute(f"SELECT count(*) FROM {ns}.events")
                    assert mine.fetchall() == [(2,)]

    bounded(pg_backend, scenario)
    assert seqs(pg_store) == [1, 2]
