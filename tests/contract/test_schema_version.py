"""A database migrated by a newer alkstore is refused, never used (docs/adr/0002 addendum).

The newer migration is simulated by recording one more version in the migrations
table by hand: this alkstore does not know it, so it cannot know what that
migration changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


def _table(backend: Backend) -> str:
    sep = "__" if backend.name == "sqlite" else "."
    return f"{backend.namespace}{sep}schema_migrations"


def newer(backend: Backend) -> tuple[int, int]:
    """Record a migration this alkstore does not know; (its version, the code's)."""
    conn: Any = backend.raw_connection()
    try:
        table = _table(backend)
        (known,) = conn.execute(f"SELECT max(version) FROM {table}").fetchall()[0]
        if backend.name == "sqlite":
            conn.execute(
                f"INSERT INTO {table} (version, name, applied_at) VALUES (?, 'future', 0)",
                (known + 1,),
            )
        else:
            conn.execute(f"INSERT INTO {table} (version, name) VALUES (%s, 'future')", (known + 1,))
            conn.commit()
    finally:
        conn.close()
    return known + 1, known


@pytest.fixture
def bumped(store: alkstore.Store, backend: Backend) -> Iterator[tuple[int, int]]:
    """The namespace migrated by this alkstore, then by a newer one."""
    yield newer(backend)


def message(versions: tuple[int, int]) -> str:
    database, code = versions
    return f"database schema {database} is newer than this alkstore ({code}); upgrade alkstore"


def test_connect_refuses_a_newer_schema(backend: Backend, bumped: tuple[int, int]) -> None:
    with pytest.raises(alkstore.SchemaTooNew) as info:
        backend.connect()
    assert str(info.value) == message(bumped)
    assert (info.value.database_version, info.value.code_version) == bumped
    assert isinstance(info.value, alkstore.StorageError)


def test_migrate_refuses_a_newer_schema_that_appeared_after_connect(backend: Backend) -> None:
    with backend.migrated() as store:
        newer(backend)
        with pytest.raises(alkstore.SchemaTooNew, match="upgrade alkstore"):
            store.migrate()
        with pytest.raises(alkstore.SchemaTooNew):
            store.sql(pending_only=True)


def test_append_on_an_application_connection_refuses_a_newer_schema(
    backend: Backend, bumped: tuple[int, int]
) -> None:
    conn: Any = backend.raw_connection()
    try:
        if backend.name == "sqlite":
            conn.execute("BEGIN")
        with pytest.raises(alkstore.SchemaTooNew) as info:
            alkstore.append(conn, OrderPlaced(order_id=1), namespace=backend.namespace)
        assert str(info.value) == message(bumped)
        # the application's transaction is untouched: it can go on and commit
        conn.execute("SELECT 1").fetchall()
        conn.execute("COMMIT") if backend.name == "sqlite" else conn.commit()
    finally:
        conn.close()


def test_append_on_an_application_connection_checks_once_per_connection(
    store: alkstore.Store, backend: Backend
) -> None:
    """The check costs one look at the migrations table per connection, not per append:
    a connection that passed it keeps appending (a process started before the upgrade
    is the operator's to restart, ADR 0002)."""
    conn: Any = backend.raw_connection()
    ns = backend.namespace
    try:
        for order_id in (1, 2):
            if backend.name == "sqlite":
                with conn:
                    alkstore.append(conn, OrderPlaced(order_id=order_id), namespace=ns)
            else:
                with conn.transaction():
                    alkstore.append(conn, OrderPlaced(order_id=order_id), namespace=ns)
            if order_id == 1:
                newer(backend)
    finally:
        conn.close()
    assert [e.payload for e in store.log.read()] == [
        OrderPlaced(order_id=1),
        OrderPlaced(order_id=2),
    ]


def test_an_unmigrated_or_current_database_is_not_refused(backend: Backend) -> None:
    store = backend.connect()  # nothing there yet: connect, then migrate
    try:
        assert store.migrate()
    finally:
        store.close()
    with backend.migrated() as again:  # the versions this alkstore knows: fine
        assert again.migrate() == []
