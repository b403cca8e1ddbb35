"""Wake hints for PostgreSQL: NOTIFY sent outside the application's transactions.

NOTIFY inside a transaction takes a cluster-wide lock at commit and serialises
every notifying commit (ADR 0004), so alkstore never notifies there. A notifier
thread per store sends one coalesced NOTIFY after our own commits, and after the
commit of a caller-owned connection it was told about (ADR 0005).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, LiteralString

import psycopg
from psycopg import pq
from psycopg.pq import TransactionStatus

from alkstore import _wake

WATCH_POLL = 0.001  # seconds between checks of caller-owned connections' transactions
NOTIFY_GAP = 0.005  # at most one NOTIFY per this many seconds (a lone commit: at once)
REARM = 0.02  # re-announce a caller-owned connection still in a transaction this often
WATCH_MAX = 30.0  # stop watching a caller-owned transaction after this (re-poll covers it)


class Notifier:
    """Sends coalesced NOTIFYs outside application transactions, from its own thread."""

    def __init__(
        self,
        conninfo: str,
        query: LiteralString,
        closed: threading.Event,
        key: tuple[object, ...],
    ) -> None:
        """`conninfo` carries the connect timeout and keepalives (`_pool.conninfo`)."""
        self.key = key
        self._conninfo = conninfo
        self._query = query.encode()
        self._closed = closed
        self._signal = threading.Event()
        self._commit_pending = False
        # caller-owned connections with appends in flight, by id():
        # [weakref, first seen, last announced]
        self._watched: dict[int, list[Any]] = {}
        self._lock = threading.Lock()
        self._trouble = _wake.Trouble("PostgreSQL NOTIFY")
        self._thread = threading.Thread(target=self._run, name="alkstore-pg-notify", daemon=True)
        self._thread.start()
        _notifiers.add(self)

    @property
    def stopped(self) -> bool:
        return self._closed.is_set()

    def committed(self) -> None:
        if self._commit_pending:
            # Already due: the notifier resets the flag before it sends, so its
            # coming NOTIFY follows this commit. (Saves a lock and a thread wake
            # per commit under load.)
            return
        with self._lock:
            self._commit_pending = True
        self._signal.set()

    def watch(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        """Notify once `conn`'s open transaction ends (it may commit the append)."""
        now = time.monotonic()
        with self._lock:
            entry = self._watched.get(id(conn))
            if entry is not None and entry[0]() is conn:
                return  # already watched: one entry per connection
            self._watched[id(conn)] = [weakref.ref(conn), now, now]
        self._signal.set()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread after its last NOTIFY; False if it is still busy after `timeout`.

        A NOTIFY to a server that stopped answering waits until the connection breaks
        (keepalives, TCP user timeout): the caller need not. The daemon thread then
        ends on its own, and the listeners' re-poll covers a hint it never sent."""
        self._closed.set()
        self._signal.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _due(self) -> bool:
        """True if a commit may need announcing; forgets connections that are done.

        The transaction status is a client-side field, read without a round trip.
        A commit followed at once by a new statement can hide between two polls,
        so a connection still in a transaction is also announced every REARM
        seconds (a spurious wake at worst) until WATCH_MAX.
        """
        now = time.monotonic()
        with self._lock:
            due, self._commit_pending = self._commit_pending, False
            keep = {}
            for key, entry in self._watched.items():
                ref, first, last = entry
                conn = ref()
                if conn is None or conn.closed:
                    due = True  # closing commits a `with psycopg.connect()` block
                    continue
                status = conn.info.transaction_status
                if status in (TransactionStatus.IDLE, TransactionStatus.UNKNOWN):
                    due = True
                    continue
                if now - last >= REARM:
                    due = True
                    entry[2] = now
                if now - first < WATCH_MAX:
                    keep[key] = entry
            self._watched = keep
        return due

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while True:
            self._signal.wait(WATCH_POLL if self._watched else None)
            self._signal.clear()
            if self._due():  # announced even when closing: the commit happened
                conn = self._notify(conn)
                # Under load one NOTIFY per gap covers every commit in it. Sleeping
                # here, not on the signal, keeps a busy cycle at one wake-up and
                # makes a committer's `signal.set()` meanwhile wake nobody.
                self._closed.wait(NOTIFY_GAP)
            if self._closed.is_set():
                break
        if conn is not None:
            conn.close()

    def _notify(self, conn: psycopg.Connection[Any] | None) -> psycopg.Connection[Any] | None:
        """Send one NOTIFY; the connection to use next time (None: reconnect then).

        A connection found broken (the server restarted, or an operator terminated
        it) is replaced at once and the NOTIFY sent again, so the commit that found
        it broken still wakes its listeners. Failures are logged (`_wake.Trouble`)."""
        for _ in range(2):
            cause: BaseException | str
            try:
                if conn is None or conn.closed:
                    # No SET on the session, which a pooler may hand to other clients:
                    # the query turns synchronous_commit off for its own commit only.
                    conn = psycopg.connect(self._conninfo, autocommit=True)
                # libpq directly (it releases the GIL): a third of a psycopg execute's CPU
                result = conn.pgconn.exec_(self._query)
                if result.status == pq.ExecStatus.TUPLES_OK:
                    self._trouble.recovered()
                    return conn
                message = result.error_message.decode("utf-8", "replace")
                cause = message or f"NOTIFY ended with status {result.status}"
            except psycopg.Error as exc:
                cause = exc
            self._trouble.failed(cause, "reconnecting; listeners re-poll until a NOTIFY is sent")
            if conn is not None:
                conn.close()
            conn = None
        return None  # listeners' re-poll covers the gap; we retry on the next commit


_notifiers: weakref.WeakSet[Notifier] = weakref.WeakSet()


def conn_key(
    namespace: str, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
) -> tuple[object, ...]:
    info = conn.info
    return (namespace, info.host, info.port, info.dbname)


def watch_commit(
    namespace: str, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
) -> None:
    """Hand a caller-owned connection to an open store's notifier for this database."""
    key = conn_key(namespace, conn)
    for notifier in list(_notifiers):
        if notifier.key == key and not notifier.stopped:
            notifier.watch(conn)
            return
