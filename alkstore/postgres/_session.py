"""What alkstore does to the PostgreSQL sessions it opens: directly, or behind a pooler.

A connection pooler in transaction mode (PgBouncer and its kind) hands one server
session to many clients in turn, so anything a client leaves on the session reaches
the next one: a `SET` (the notifier's `synchronous_commit = off` once made other
applications' commits return before they were durable), a prepared statement (the
next client's session does not have it: "prepared statement does not exist"), a
LISTEN (its notifications go to whoever holds the session). Behind a pooler alkstore
therefore leaves nothing on a session (docs/adr/0020):

- no `SET`: what must hold for one transaction is `set_config(..., true)` (SET LOCAL)
  in it; the read-committed isolation the sequencer needs (ADR 0004) must be the
  role's or the database's default, which `probe()` checks;
- no server-side prepared statements: psycopg's `prepare_threshold` is None and the
  store's own libpq statements (ADR 0010) are sent unnamed;
- LISTEN only on a direct URL (`listen_url`), never through the pooler.

Directly connected sessions are alkstore's alone: there it keeps its prepared
statements and sets the isolation level on the session, as before.

Behind a pooler or not is the `pooler` argument of `alkstore.connect`, or the URL's
`pooler=true|false`; when neither says, `probe()` finds out: a pooler answers the
connection with a backend process id of its own making, not the server's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg

from alkstore import _errors
from alkstore.postgres import _conn, _sqlstate

READ_COMMITTED = "read committed"


@dataclass(frozen=True)
class Server:
    """What one connection learned about the path to the server."""

    pooled: bool  # the backend pid the server reports is not the one we were given
    isolation: str  # the sessions' default_transaction_isolation
    user: str  # the role alkstore logs in as


def probe(conninfo: str, query: LiteralString) -> Server:
    """Connect once: fail fast with the server's reason when the database cannot be
    reached (StorageError), else say whether a pooler sits in between."""
    try:
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
            row = conn.execute(query).fetchone()
            assert row is not None
            return Server(int(row[0]) != conn.info.backend_pid, str(row[1]), conn.info.user)
    except psycopg.Error as exc:
        raise _errors.StorageError(f"cannot connect to PostgreSQL: {exc}") from exc


def check_pooled(server: Server) -> None:
    """Behind a pooler alkstore sets nothing on its sessions: they must start in READ
    COMMITTED, which the sequencer relies on (ADR 0004)."""
    if server.isolation != READ_COMMITTED:
        raise _errors.ConfigurationError(
            "behind a connection pooler alkstore changes no session setting, and the "
            f"sessions of role {server.user!r} start with default_transaction_isolation = "
            f"{server.isolation!r}; alkstore needs {READ_COMMITTED!r}: run ALTER ROLE "
            f"{server.user} SET default_transaction_isolation = {READ_COMMITTED!r} "
            "(docs/guide/postgresql-platform.md)"
        )


class Sessions:
    """How each new connection is set up (the pool's, the lease renewal's)."""

    def __init__(self, pooler: bool, set_isolation: LiteralString) -> None:
        self.pooler = pooler
        self._set_isolation = set_isolation

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        if self.pooler:
            conn.prepare_threshold = None  # psycopg prepares nothing on its own
            if isinstance(conn, _conn.Connection):
                conn.unnamed = True  # nor does the store (ADR 0010's statements)
        else:
            # A session of its own: READ COMMITTED whatever the database default is
            # (the sequencer relies on each statement seeing everything committed before it)
            conn.execute(self._set_isolation)


class Reserved:
    """A connection of its own, outside the pool: lease renewal never waits for one the
    application's handlers hold (ADR 0012). Connects on first use and after a failure."""

    def __init__(
        self,
        url: str,
        queries: dict[str, LiteralString],
        closed: threading.Event,
        sessions: Sessions,
        role: str,
    ):
        self._url = url
        self._q = queries
        self._closed = closed
        self._sessions = sessions
        self.role = role
        self._conn: psycopg.Connection[Any] | None = None

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if self._closed.is_set():
            raise _errors.AlkstoreError("the store is closed")
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._url, autocommit=True)  # timeout: conninfo
                self._sessions.configure(self._conn)
            cursor = self._conn.execute(self._q[name], params)
            return cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            if self._conn is not None and self._conn.broken:
                self._conn.close()
                self._conn = None
            raise _sqlstate.translated(exc, name, self.role) from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
