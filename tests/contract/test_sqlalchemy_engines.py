"""SQLAlchemy on each engine: on PostgreSQL (postgresql+psycopg) the event and the job
join the session's transaction; on SQLite SQLAlchemy's connection is the standard
library's sqlite3, which alkstore refuses with a typed error before it begins or writes
anything (docs/adr/0024). The PostgreSQL behaviour in full: tests/integration/
test_sqlalchemy.py."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


def _url(backend: Backend) -> str:
    return backend.url.replace("postgresql://", "postgresql+psycopg://", 1)  # sqlite: pysqlite


def test_a_session_commits_the_event_and_the_job_or_is_refused(
    store: alkstore.Store, backend: Backend
) -> None:
    ns = backend.namespace
    engine = sa.create_engine(_url(backend))
    try:
        with orm.Session(engine) as session, engine.connect() as conn:
            for holder in (session, conn):
                if backend.name == "postgres":
                    alkstore.append(holder, OrderPlaced(order_id=1), namespace=ns)
                    alkstore.enqueue(holder, "email", 1, namespace=ns)
                    holder.commit()
                    continue
                with pytest.raises(alkstore.UnsupportedConnection, match=r"sqlite3.*apsw"):
                    alkstore.append(holder, OrderPlaced(order_id=1), namespace=ns)
                with pytest.raises(alkstore.UnsupportedConnection, match=r"sqlite3.*apsw"):
                    alkstore.enqueue(holder, "email", 1, namespace=ns)
                assert not holder.in_transaction()  # refused before anything began
    finally:
        engine.dispose()
    expected = 2 if backend.name == "postgres" else 0
    assert [e.payload for e in store.log.read()] == [OrderPlaced(order_id=1)] * expected
    assert len(store.queue("email").jobs()) == expected
