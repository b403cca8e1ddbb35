"""apsw at the seam: the settings of every connection, `:name` parameters made
positional, BEGIN IMMEDIATE, and the alkstore error for each apsw error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import apsw

from alkstore import _errors, _sql
from alkstore.sqlite import _busy

# a string literal or a comment (both kept as they are), or a `:name` parameter
_NAMED = re.compile(r"'(?:[^']|'')*'|--[^\n]*|(?<![:\w]):([A-Za-z_]\w*)")
_PROSE = re.compile(r"'(?:[^']|'')*'|--[^\n]*")  # string literals and comments


def positional(query: str) -> tuple[str, _sql.Binder | None]:
    """`:name` parameters -> numbered `?N` ones, and a binder from the params dict.

    apsw binds a dict by building a str for every parameter name and hashing it,
    on every execution; `itemgetter` on the interned keys costs a fraction of that
    (docs/performance.md). Queries without named parameters, and scripts of several
    statements (apsw hands positional values out statement by statement), are left
    alone; a `;` or `:` in a comment or a string literal counts for neither."""
    code = _PROSE.sub("", query)
    if ";" in code or ":" not in code:
        return query, None
    return _sql.numbered(query, _NAMED, "?")


def configure(conn: apsw.Connection, gate: _busy.Gate | None = None) -> None:
    """Settings every alkstore SQLite connection uses (`gate`: defer to reserved ones)."""
    conn.set_busy_handler(_busy.BusyWait(gate=gate))
    # The query planner stability guarantee: a plan never depends on bound values. Without
    # it SQLite compiled the claim again before every run (its `LIMIT :n`, its `queue =
    # :queue` beside the partial indexes): ~20 us of a 25 us claim (docs/adr/0006, addendum
    # of 2026-12-01). The plans the tests pin are the plans every run uses.
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")


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
