"""SQLAlchemy 2.x: the psycopg connection under a Session, Connection, AsyncSession or
AsyncConnection, in the transaction SQLAlchemy has open there (docs/adr/0024).

Imported only when such an object reaches `alkstore.append` / `alkstore.enqueue`
(`pip install 'alkstore[sqlalchemy]'`). The dialect is checked before anything else,
so a SQLite engine is refused without beginning anything. The transaction is begun
as SQLAlchemy's own `execute` would begin it (autobegin): a Session's with
`session.connection()`, a Connection's with `begin()` when none is in progress. Then
the event or job is written on the driver connection: the session's `commit()`
commits it with the business rows it flushes, `rollback()` and a rolled-back
`begin_nested()` take it away.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import engine as sa_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy import orm
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.ext import asyncio as sa_asyncio

from alkstore import _errors, _owned


def _check_dialect(dialect: Dialect, holder: object) -> None:
    if dialect.name == "postgresql" and dialect.driver == "psycopg":
        return
    if dialect.name == "sqlite":
        raise _owned.unsupported(
            holder, f"a SQLAlchemy SQLite engine ({dialect.driver}): {_owned.SQLITE3}"
        )
    raise _owned.unsupported(
        holder,
        f"a SQLAlchemy engine on {dialect.name}+{dialect.driver}; on PostgreSQL use "
        "the psycopg 3 dialect (postgresql+psycopg://)",
    )


def driver(conn: Any) -> _owned.Sync | _owned.Async:
    """The psycopg connection under a SQLAlchemy object (an awaitable for the async ones)."""
    if isinstance(conn, orm.scoped_session):
        conn = conn()
    if isinstance(conn, orm.Session):
        _check_dialect(conn.get_bind().dialect, conn)
        with _no_autobegin(conn):
            connection = conn.connection()  # begins the session's transaction if none is
        return _owned.checked(connection.connection.driver_connection, conn)
    if isinstance(conn, sa_engine.Connection):
        _check_dialect(conn.dialect, conn)
        if not conn.in_transaction():
            conn.begin()  # as conn.execute() would: conn.commit() / rollback() end it
        return _owned.checked(conn.connection.driver_connection, conn)
    if isinstance(conn, sa_asyncio.async_scoped_session):
        conn = conn()
    if isinstance(conn, sa_asyncio.AsyncSession):
        _check_dialect(conn.sync_session.get_bind().dialect, conn)
        return _owned.checked_async(_from_session(conn), conn)
    if isinstance(conn, sa_asyncio.AsyncConnection):
        _check_dialect(conn.dialect, conn)
        return _owned.checked_async(_from_connection(conn), conn)
    raise _owned.unsupported(conn)


async def _from_session(session: sa_asyncio.AsyncSession) -> object:
    with _no_autobegin(session.sync_session):
        conn = await session.connection()
    return await _from_connection(conn)


@contextmanager
def _no_autobegin(session: orm.Session) -> Iterator[None]:
    """NotInTransaction, as everywhere else, where SQLAlchemy would raise its own
    InvalidRequestError: autobegin=False and no transaction begun, or a transaction
    that a failed flush left to be rolled back."""
    try:
        yield
    except sa_exc.PendingRollbackError as exc:  # a failed flush: as psycopg's INERROR
        raise _errors.NotInTransaction(
            "the session's transaction has failed; roll it back"
        ) from exc
    except sa_exc.InvalidRequestError as exc:
        if session.in_transaction():
            raise
        raise _errors.NotInTransaction(
            "alkstore needs an open transaction on this session (autobegin is off: "
            "`with session.begin():`); alkstore never autocommits"
        ) from exc


async def _from_connection(conn: sa_asyncio.AsyncConnection) -> object:
    if not conn.in_transaction():
        await conn.begin()
    raw = await conn.get_raw_connection()
    return raw.driver_connection
