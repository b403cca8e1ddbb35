"""SQLAlchemy 2.x on PostgreSQL (psycopg 3 dialect, sync and async): `alkstore.append`
and `alkstore.enqueue` on a Session, Connection, AsyncSession or AsyncConnection join
the ORM's transaction (docs/adr/0024)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

import alkstore
from tests.conftest import Backend
from tests.events import OrderPlaced


class Boom(Exception):
    pass


class Base(orm.DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"  # in the test's namespace (schema_translate_map)
    __table_args__ = {"schema": "app"}  # noqa: RUF012

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=False)
    total_cents: orm.Mapped[int]


class Place:
    """A migrated store and SQLAlchemy engines on one namespace: the business table
    lives in the namespace's schema too, so dropping it cleans everything."""

    def __init__(self, backend: Backend) -> None:
        self.ns = backend.namespace
        self.store = backend.connect()
        self.store.migrate()
        url = backend.url.replace("postgresql://", "postgresql+psycopg://", 1)
        options: dict[str, Any] = {"schema_translate_map": {"app": self.ns}}
        self.engine = sa.create_engine(url, execution_options=options)
        self.async_engine = create_async_engine(url, execution_options=options)
        Base.metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()
        asyncio.run(self.async_engine.dispose())
        self.store.close()

    def orders(self) -> list[int]:
        with orm.Session(self.engine) as session:
            return list(session.scalars(sa.select(Order.id).order_by(Order.id)))

    def events(self) -> list[int]:
        payloads = [e.payload for e in self.store.log.read()]
        assert all(isinstance(p, OrderPlaced) for p in payloads)
        return [p.order_id for p in payloads if isinstance(p, OrderPlaced)]

    def jobs(self) -> list[Any]:
        return [j.raw for j in self.store.queue("email").jobs()]

    def write(self, conn: Any, order_id: int) -> None:
        """The outbox half of placing an order: an event and a job on `conn`."""
        alkstore.append(conn, OrderPlaced(order_id=order_id), namespace=self.ns)
        alkstore.enqueue(conn, "email", order_id, namespace=self.ns)

    async def write_async(self, conn: Any, order_id: int) -> None:
        await alkstore.append(conn, OrderPlaced(order_id=order_id), namespace=self.ns)
        await alkstore.enqueue(conn, "email", order_id, namespace=self.ns)


@pytest.fixture
def place(pg_backend: Backend) -> Iterator[Place]:
    p = Place(pg_backend)
    try:
        yield p
    finally:
        p.close()


def test_session_commit_rollback_and_exception(place: Place) -> None:
    with orm.Session(place.engine) as session:
        session.add(Order(id=1, total_cents=10))
        place.write(session, 1)
        session.commit()
        session.add(Order(id=2, total_cents=20))
        place.write(session, 2)
        session.rollback()
    with pytest.raises(Boom), orm.Session(place.engine) as session, session.begin():
        session.add(Order(id=3, total_cents=30))
        place.write(session, 3)
        raise Boom
    assert (place.orders(), place.events(), place.jobs()) == ([1], [1], ["1"])


def test_session_savepoint_rollback_takes_only_its_writes(place: Place) -> None:
    with orm.Session(place.engine) as session, session.begin():
        session.add(Order(id=1, total_cents=10))
        place.write(session, 1)
        with pytest.raises(Boom), session.begin_nested():
            session.add(Order(id=2, total_cents=20))
            place.write(session, 2)
            raise Boom
        savepoint = session.begin_nested()
        place.write(session, 3)
        savepoint.commit()  # released: it commits with the outer transaction
    assert (place.orders(), place.events(), place.jobs()) == ([1], [1, 3], ["1", "3"])


def test_the_flush_and_the_event_commit_together_or_not_at_all(place: Place) -> None:
    """The event is written at once, the order at the flush in commit(): a failing
    flush rolls the event back; a flush before the event commits both together."""
    with orm.Session(place.engine) as session:
        session.add(Order(id=1, total_cents=10))
        session.commit()
    with orm.Session(place.engine) as session:
        place.write(session, 2)  # before the pending order is flushed
        session.add(Order(id=1, total_cents=99))  # a duplicate key: the flush fails
        with pytest.raises(sa.exc.IntegrityError):
            session.commit()
        with pytest.raises(alkstore.NotInTransaction, match="roll it back"):
            place.write(session, 4)  # the failed flush left the transaction to roll back
        session.rollback()
        session.add(Order(id=3, total_cents=30))
        session.flush()
        place.write(session, 3)
        assert session.scalar(sa.select(sa.func.count()).select_from(Order)) == 2  # autoflush
        session.commit()
    assert (place.orders(), place.events(), place.jobs()) == ([1, 3], [3], ["3"])


def test_core_connection_joins_or_begins_its_transaction(place: Place) -> None:
    orders = sa.insert(Order)
    with place.engine.connect() as conn:
        place.write(conn, 1)  # begins the transaction, as conn.execute() would
        assert conn.in_transaction()
        conn.commit()
        conn.execute(orders.values(id=1, total_cents=10))
        conn.commit()
        conn.execute(orders.values(id=2, total_cents=20))
        place.write(conn, 2)
        conn.rollback()
        place.write(conn, 4)  # closed without commit: rolled back
    with place.engine.begin() as conn:
        conn.execute(orders.values(id=3, total_cents=30))
        place.write(conn, 3)
    assert (place.orders(), place.events(), place.jobs()) == ([1, 3], [1, 3], ["1", "3"])


def test_autocommit_isolation_is_refused(place: Place) -> None:
    auto = place.engine.execution_options(isolation_level="AUTOCOMMIT")
    with auto.connect() as conn, pytest.raises(alkstore.NotInTransaction):
        place.write(conn, 1)
    with orm.Session(auto) as session, pytest.raises(alkstore.NotInTransaction):
        place.write(session, 1)
    assert (place.events(), place.jobs()) == ([], [])


def test_a_session_without_autobegin_needs_its_begin(place: Place) -> None:
    with orm.Session(place.engine, autobegin=False) as session:
        with pytest.raises(alkstore.NotInTransaction, match="autobegin"):
            place.write(session, 1)
        with session.begin():
            place.write(session, 2)

    async def main() -> None:
        async with AsyncSession(place.async_engine, autobegin=False) as session:
            with pytest.raises(alkstore.NotInTransaction, match="autobegin"):
                await place.write_async(session, 3)

    asyncio.run(main())
    assert (place.events(), place.jobs()) == ([2], ["2"])


def test_scoped_session_is_the_session_of_the_scope(place: Place) -> None:
    scoped = orm.scoped_session(orm.sessionmaker(place.engine))
    scoped.add(Order(id=1, total_cents=10))
    place.write(scoped, 1)
    scoped.commit()
    scoped.remove()
    assert (place.orders(), place.events(), place.jobs()) == ([1], [1], ["1"])


def test_async_session_and_connection(place: Place) -> None:
    async def main() -> None:
        async with AsyncSession(place.async_engine) as session:
            session.add(Order(id=1, total_cents=10))
            await place.write_async(session, 1)
            await session.commit()
            session.add(Order(id=2, total_cents=20))
            await place.write_async(session, 2)
            await session.rollback()
            async with session.begin():
                await place.write_async(session, 3)
                with pytest.raises(Boom):
                    async with session.begin_nested():
                        session.add(Order(id=4, total_cents=40))
                        await place.write_async(session, 4)
                        raise Boom
        with pytest.raises(Boom):
            async with AsyncSession(place.async_engine) as session, session.begin():
                session.add(Order(id=5, total_cents=50))
                await place.write_async(session, 5)
                raise Boom
        async with AsyncSession(place.async_engine) as session:
            await place.write_async(session, 6)  # before the failing flush
            session.add(Order(id=1, total_cents=99))
            with pytest.raises(sa.exc.IntegrityError):
                await session.commit()
            with pytest.raises(alkstore.NotInTransaction, match="roll it back"):
                await place.write_async(session, 9)
        async with place.async_engine.connect() as conn:
            await place.write_async(conn, 7)  # begins, as conn.execute() would
            assert conn.in_transaction()
            await conn.commit()
            await conn.execute(sa.insert(Order).values(id=7, total_cents=70))
            await conn.commit()
            await place.write_async(conn, 8)
            await conn.rollback()

    asyncio.run(main())
    assert (place.orders(), place.events(), place.jobs()) == ([1, 7], [1, 3, 7], ["1", "3", "7"])
