"""The connection under `alkstore.append(conn, ...)` / `alkstore.enqueue(conn, ...)`.

The application hands alkstore what it holds: a driver connection (apsw, psycopg sync
or async), a SQLAlchemy session or connection, or Django's connection. alkstore writes
through the driver connection underneath, inside the transaction open there, and
never opens a connection of its own (docs/adr/0024). SQLAlchemy's adapter
(`_sqlalchemy`) is imported only when one of its objects arrives; Django's connection is
read through its attributes, without importing Django. Both are optional extras.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeAlias

import apsw
import psycopg

from alkstore import _errors

Sync: TypeAlias = "apsw.Connection | psycopg.Connection[Any]"
Async: TypeAlias = "Awaitable[psycopg.AsyncConnection[Any]]"

# What the application may pass (the overloads of append and enqueue): on the async
# kinds the call returns an awaitable. SQLAlchemy is an optional extra: without it these
# names are Any to a type checker.
if TYPE_CHECKING:
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

SyncHolder: TypeAlias = (
    "apsw.Connection | psycopg.Connection[Any] | Session | SAConnection | scoped_session[Any]"
)
AsyncHolder: TypeAlias = (
    "psycopg.AsyncConnection[Any] | AsyncSession | SAAsyncConnection | async_scoped_session[Any]"
)

SUPPORTED = (
    "an apsw.Connection, a psycopg (3) Connection or AsyncConnection, a SQLAlchemy "
    "Session, Connection, AsyncSession or AsyncConnection on postgresql+psycopg, or a "
    "Django connection on the postgresql backend with psycopg 3"
)
SQLITE3 = (
    "on SQLite alkstore writes through apsw, and this is the standard library's sqlite3 "
    "(SQLAlchemy's and Django's SQLite backends use it). Writing through it would put a "
    "second copy of the SQLite library on the database file in every process that also "
    "opens an alkstore store, which SQLite documents as a way to corrupt it (POSIX locks "
    "of one copy are dropped when the other closes the file). Append on an apsw "
    "connection (`alkstore.append(apsw_conn, ...)` or `store.transaction()`), or use "
    "PostgreSQL for the application (docs/adr/0024)"
)


def _is_sqlite3(conn: object) -> bool:
    """A standard-library sqlite3 connection (not importing sqlite3 to ask: if it was
    never imported, this is not one of its connections)."""
    module = sys.modules.get("sqlite3")
    return module is not None and isinstance(conn, module.Connection)


def unsupported(what: object, detail: str | None = None) -> _errors.UnsupportedConnection:
    """The error for a connection alkstore cannot write through (nothing was written)."""
    kind = f"{type(what).__module__}.{type(what).__qualname__}"
    if _is_sqlite3(what):
        return _errors.UnsupportedConnection(f"{kind} is not supported: {SQLITE3}")
    return _errors.UnsupportedConnection(
        f"{kind} is not supported{': ' + detail if detail else ''}; "
        f"alkstore writes through {SUPPORTED}"
    )


def checked(driver: object, holder: object) -> Sync:
    """`driver` (found under `holder`) if alkstore can write through it synchronously."""
    if isinstance(driver, psycopg.Connection | apsw.Connection):
        return driver
    if _is_sqlite3(driver):
        raise unsupported(driver)
    raise unsupported(driver, f"found under {type(holder).__qualname__}")


async def checked_async(pending: Awaitable[object], holder: object) -> psycopg.AsyncConnection[Any]:
    driver = await pending
    if isinstance(driver, psycopg.AsyncConnection):
        return driver
    raise unsupported(driver, f"found under {type(holder).__qualname__}")


def driver(conn: object) -> Sync | Async:
    """The driver connection under `conn`, or an awaitable of it for the async kinds.

    Raises UnsupportedConnection (nothing written, no connection opened) for anything
    else, NotInTransaction where the framework says its transaction is unusable."""
    if isinstance(conn, psycopg.Connection | apsw.Connection):
        return conn
    if isinstance(conn, psycopg.AsyncConnection):
        return _ready(conn)
    package = type(conn).__module__.partition(".")[0]
    if package == "sqlalchemy":
        from alkstore import _sqlalchemy  # optional: only for SQLAlchemy's objects

        return _sqlalchemy.driver(conn)
    if package == "django" or _django_like(conn):
        return _django(conn)
    raise unsupported(conn)


async def _ready(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
    return conn


def _django_like(conn: object) -> bool:
    """A Django database connection (`django.db.connection`, `connections[alias]`, or a
    backend of another package built on Django's base class)."""
    return hasattr(conn, "in_atomic_block") and hasattr(conn, "ensure_connection")


def _django(conn: Any) -> Sync:
    """The psycopg connection under Django's connection (Django 4.2 LTS, 5.x), inside
    `transaction.atomic()`. Django is never imported: the connection is read through
    its documented attributes. The event or job is written in the transaction
    `atomic()` opened, so it commits and rolls back with the block, and a nested
    `atomic()` is a savepoint for it too: no `transaction.on_commit` hook is needed.
    Outside `atomic()` Django autocommits, and alkstore never does: NotInTransaction."""
    vendor = getattr(conn, "vendor", None)
    if vendor == "sqlite":
        raise unsupported(conn, f"a Django SQLite database: {SQLITE3}")
    if vendor != "postgresql":
        raise unsupported(
            conn, f"a Django {vendor} database; alkstore runs on Django's postgresql backend"
        )
    conn.validate_thread_sharing()  # Django's own rule for its connections
    if conn.in_atomic_block and conn.needs_rollback:
        raise _errors.NotInTransaction(
            "Django marked this atomic block for rollback (an error inside it was caught "
            "without a savepoint); nothing more can be written in it"
        )
    if conn.get_autocommit():
        raise _errors.NotInTransaction(
            "alkstore needs an open transaction on Django's connection: call it inside "
            "`with transaction.atomic():`; alkstore never autocommits"
        )
    conn.ensure_connection()
    return checked(conn.connection, conn)
