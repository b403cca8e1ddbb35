"""`alkstore.append` on an apsw connection the application owns."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import apsw

from alkstore import _engine, _errors, _sql
from alkstore.sqlite import _engine as _sqlite

_PACKAGE = "alkstore.sqlite"


def insert_rows(conn: apsw.Connection, namespace: str, rows: Sequence[_engine.EventRow]) -> None:
    query = _sql.queries(_PACKAGE, namespace)["insert_event"]
    try:
        if len(rows) == 1:
            conn.execute(query, rows[0])
        else:
            conn.executemany(query, rows)
    except apsw.Error as exc:
        raise _sqlite._storage_error(conn, namespace, exc) from exc


def append_on(conn: apsw.Connection, namespace: str, rows: Sequence[_engine.EventRow]) -> None:
    """`alkstore.append` on an apsw connection the application owns."""
    if not conn.in_transaction:
        raise _errors.NotInTransaction(
            "alkstore.append needs an open transaction on this apsw connection "
            "(BEGIN, or `with conn:`); alkstore never autocommits an append"
        )
    if namespace not in _checked.get(conn, ()):
        with _sqlite._translate(conn, namespace):
            found = _sqlite._version(conn, namespace)
        _sql.check_version(_PACKAGE, found)
        _checked.setdefault(conn, set()).add(namespace)
    insert_rows(conn, namespace, rows)


# Application connections whose schema version was checked, per namespace: once per
# connection, not per append (docs/adr/0002, addendum 2026-12-01).
_checked: weakref.WeakKeyDictionary[apsw.Connection, set[str]] = weakref.WeakKeyDictionary()
