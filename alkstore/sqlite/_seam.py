"""apsw's errors at the seam: the alkstore error for each, and BEGIN IMMEDIATE."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import apsw

from alkstore import _errors
from alkstore.sqlite import _busy


def begin(conn: apsw.Connection, namespace: str) -> None:
    """BEGIN IMMEDIATE; a lock held past every retry is DatabaseBusy, not apsw's error."""
    try:
        _busy.execute(conn, "BEGIN IMMEDIATE")
    except apsw.Error as exc:
        raise storage_error(conn, namespace, exc) from exc


def table_exists(conn: apsw.Connection, table: str) -> bool:
    query = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
    return bool(conn.execute(query, (table,)).fetchall()[0][0])


def storage_error(conn: apsw.Connection, namespace: str, exc: apsw.Error) -> _errors.AlkstoreError:
    """The alkstore error for an apsw error (a missing table means not migrated; a busy
    database is DatabaseBusy, which says the transaction can be retried)."""
    if isinstance(exc, apsw.BusyError):
        return _errors.DatabaseBusy(str(exc))
    if isinstance(exc, apsw.ReadOnlyError | apsw.PermissionsError | apsw.AuthError):
        return _errors.PermanentError(f"{type(exc).__name__}: {exc}")  # no retry fixes it
    if isinstance(exc, apsw.SQLError):
        tables = (f"{namespace}__events", f"{namespace}__jobs")
        if not all(table_exists(conn, table) for table in tables):
            return _errors.NotMigrated()
    return _errors.StorageError(str(exc))


@contextmanager
def translate(conn: apsw.Connection, namespace: str) -> Iterator[None]:
    """Stop apsw errors at the seam."""
    try:
        yield
    except apsw.Error as exc:
        raise storage_error(conn, namespace, exc) from exc
