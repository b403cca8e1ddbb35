"""`alkstore.append` / `alkstore.enqueue` on an apsw connection the application owns."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import apsw

from alkstore import _engine, _errors, _sql
from alkstore.sqlite import _engine as _sqlite
from alkstore.sqlite import _seam

_PACKAGE = "alkstore.sqlite"


def insert_rows(conn: apsw.Connection, namespace: str, rows: Sequence[_engine.EventRow]) -> None:
    query = _sql.queries(_PACKAGE, namespace)["insert_event"]
    try:
        if len(rows) == 1:
            conn.execute(query, rows[0])
        else:
            conn.executemany(query, rows)
    except apsw.Error as exc:
        raise _seam.storage_error(conn, namespace, exc) from exc


def _check(conn: apsw.Connection, namespace: str, what: str) -> None:
    if not conn.in_transaction:
        raise _errors.NotInTransaction(
            f"alkstore.{what} needs an open transaction on this apsw connection "
            f"(BEGIN, or `with conn:`); alkstore never autocommits an {what}"
        )
    if namespace not in _checked.get(conn, ()):
        with _seam.translate(conn, namespace):
            found = _sqlite._version(conn, namespace)
        _sql.check_version(_PACKAGE, found)
        _checked.setdefault(conn, set()).add(namespace)


def append_on(conn: apsw.Connection, namespace: str, rows: Sequence[_engine.EventRow]) -> None:
    """`alkstore.append` on an apsw connection the application owns."""
    _check(conn, namespace, "append")
    insert_rows(conn, namespace, rows)


def enqueue_on(
    conn: apsw.Connection, namespace: str, name: str, params: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """`alkstore.enqueue` on an apsw connection the application owns: the named query
    (`enqueue` or `enqueue_dedupe`), its rows (the job id; none for a duplicate)."""
    _check(conn, namespace, "enqueue")
    with _seam.translate(conn, namespace):
        return conn.execute(_sql.queries(_PACKAGE, namespace)[name], params).fetchall()


# Application connections whose schema version was checked, per namespace: once per
# connection, not per append (docs/adr/0002, addendum 2026-12-01).
_checked: weakref.WeakKeyDictionary[apsw.Connection, set[str]] = weakref.WeakKeyDictionary()
