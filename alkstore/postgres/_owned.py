"""`alkstore.append` / `alkstore.enqueue` on a psycopg connection the application owns
(sync or async), inside the transaction open on it."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg
from psycopg.pq import TransactionStatus

from alkstore import _engine, _errors, _sql
from alkstore.postgres import _notify, _sqlstate

_PACKAGE = "alkstore.postgres"
translate = _sqlstate.translate


def insert(
    conn: psycopg.Connection[Any], query: LiteralString, rows: Sequence[_engine.EventRow]
) -> None:
    with translate():
        if len(rows) == 1:
            conn.execute(query, rows[0])
        else:
            conn.cursor().executemany(query, rows)


def version(conn: psycopg.Connection[Any], q: dict[str, LiteralString]) -> int | None:
    """The newest migration recorded in the database (None: not migrated)."""
    exists = conn.execute(q["migrations_table_exists"]).fetchone()
    if not (exists and exists[0]):
        return None
    row = conn.execute(q["schema_version"]).fetchone()
    return None if row is None or row[0] is None else int(row[0])


# Application connections whose schema version was checked, per namespace: once per
# connection, not per append (docs/adr/0002, addendum 2026-12-01).
_checked: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def _check_schema(conn: psycopg.Connection[Any], namespace: str) -> None:
    if namespace in _checked.get(conn, ()):
        return
    with translate():
        found = version(conn, _sql.queries(_PACKAGE, namespace))
    _sql.check_version(_PACKAGE, found)
    _checked.setdefault(conn, set()).add(namespace)


async def _check_schema_async(conn: psycopg.AsyncConnection[Any], namespace: str) -> None:
    if namespace in _checked.get(conn, ()):
        return
    q = _sql.queries(_PACKAGE, namespace)
    found = None
    with translate():
        exists = await (await conn.execute(q["migrations_table_exists"])).fetchone()
        if exists and exists[0]:
            row = await (await conn.execute(q["schema_version"])).fetchone()
            found = None if row is None or row[0] is None else int(row[0])
    _sql.check_version(_PACKAGE, found)
    _checked.setdefault(conn, set()).add(namespace)


def _check_open(status: TransactionStatus, autocommit: bool, what: str = "append") -> None:
    if status == TransactionStatus.INTRANS or (status == TransactionStatus.IDLE and not autocommit):
        return
    if status == TransactionStatus.INERROR:
        raise _errors.NotInTransaction("the connection's transaction has failed; roll it back")
    raise _errors.NotInTransaction(
        f"alkstore.{what} needs an open transaction on this psycopg connection "
        "(`with conn.transaction():`, or a non-autocommit connection); "
        f"alkstore never autocommits an {what}"
    )


def append_on(
    conn: psycopg.Connection[Any], namespace: str, rows: Sequence[_engine.EventRow]
) -> None:
    """`alkstore.append` on a psycopg connection the application owns."""
    _check_open(conn.info.transaction_status, conn.autocommit)
    _check_schema(conn, namespace)
    insert(conn, _sql.queries(_PACKAGE, namespace)["insert_event"], rows)
    _notify.watch_commit(namespace, conn)


async def append_on_async(
    conn: psycopg.AsyncConnection[Any], namespace: str, rows: Sequence[_engine.EventRow]
) -> None:
    """`await alkstore.append(...)` on an application-owned psycopg AsyncConnection."""
    _check_open(conn.info.transaction_status, conn.autocommit)
    await _check_schema_async(conn, namespace)
    query = _sql.queries(_PACKAGE, namespace)["insert_event"]
    with translate():
        if len(rows) == 1:
            await conn.execute(query, rows[0])
        else:
            await conn.cursor().executemany(query, rows)
    _notify.watch_commit(namespace, conn)


def enqueue_on(
    conn: psycopg.Connection[Any], namespace: str, name: str, params: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """`alkstore.enqueue` on a psycopg connection the application owns: the named query
    (`enqueue` or `enqueue_dedupe`), its rows (the job id; none for a duplicate)."""
    _check_open(conn.info.transaction_status, conn.autocommit, "enqueue")
    _check_schema(conn, namespace)
    query = _sql.queries(_PACKAGE, namespace)[name]
    with translate(name):
        if conn.pgconn.pipeline_status:  # the application's pipeline: a nested block's
            with conn.pipeline():  # exit syncs, so the reply is there to read
                rows = conn.execute(query, params).fetchall()
        else:
            rows = conn.execute(query, params).fetchall()
    _notify.watch_commit(namespace, conn)
    return rows


async def enqueue_on_async(
    conn: psycopg.AsyncConnection[Any], namespace: str, name: str, params: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """`await alkstore.enqueue(...)` on an application-owned psycopg AsyncConnection."""
    _check_open(conn.info.transaction_status, conn.autocommit, "enqueue")
    await _check_schema_async(conn, namespace)
    query = _sql.queries(_PACKAGE, namespace)[name]
    with translate(name):
        if conn.pgconn.pipeline_status:
            async with conn.pipeline():
                rows = await (await conn.execute(query, params)).fetchall()
        else:
            rows = await (await conn.execute(query, params)).fetchall()
    _notify.watch_commit(namespace, conn)
    return rows
