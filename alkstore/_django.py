"""Django (4.2 LTS, 5.x): the psycopg 3 connection under Django's database connection,
inside `transaction.atomic()` (docs/adr/0024).

Imported only when Django's connection reaches `alkstore.append` / `alkstore.enqueue`
(`pip install 'alkstore[django]'`); Django itself is never imported here: the
connection is read through its documented attributes. The event or job is written on
the connection Django holds, in the transaction `atomic()` opened, so it commits and
rolls back with the block, a nested `atomic()` is a savepoint for it too, and no
`transaction.on_commit` hook is needed. Outside `atomic()` Django runs in autocommit,
and alkstore never autocommits: NotInTransaction.
"""

from __future__ import annotations

from typing import Any

from alkstore import _errors, _owned


def looks_like(conn: object) -> bool:
    """A Django database connection (`django.db.connection`, `connections[alias]`, or a
    backend of another package built on Django's base class)."""
    return hasattr(conn, "in_atomic_block") and hasattr(conn, "ensure_connection")


def driver(conn: Any) -> _owned.Sync:
    """The psycopg connection under Django's connection, checked for alkstore's use."""
    vendor = getattr(conn, "vendor", None)
    if vendor == "sqlite":
        raise _owned.unsupported(conn, f"a Django SQLite database: {_owned.SQLITE3}")
    if vendor != "postgresql":
        raise _owned.unsupported(
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
    return _owned.checked(conn.connection, conn)
