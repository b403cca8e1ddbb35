"""Store transactions of one process on a file, committed together (ADR 0028).

Every store transaction of an engine runs on one writer connection, one at a time (the
turn: a thread waits on a lock, not in SQLite's busy handler, ADR 0001 addendum
2026-12-01c). A transaction that ends while other threads wait for the turn does not
commit: it releases its savepoint, hands the still open SQLite transaction to the next
thread, and waits; the last one of the group commits for all. The group's first member
begins it (BEGIN IMMEDIATE), every later one runs inside a SAVEPOINT of its own, so an
exception rolls back that member's writes only, and `with store.transaction()` returns
only once its writes are committed. Members of a group see the writes of the members
before them, which commit with theirs or fail with them: the group is a serial order of
the transactions, committed at once (one commit, one WAL write of the pages they share,
instead of one per transaction).

A group ends when nobody waits for the turn, at GROUP_MAX members, after GROUP_AGE
seconds, or when a lease renewal waits for SQLite's write lock (`_busy.Gate`, ADR 0012):
the next member commits the group before it begins, then lets the renewal go first.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING

import apsw

from alkstore import _errors
from alkstore.sqlite import _busy
from alkstore.sqlite._seam import begin as _begin
from alkstore.sqlite._seam import storage_error as _storage_error

if TYPE_CHECKING:
    from alkstore.sqlite._engine import SqliteEngine

GROUP_MAX = 64  # transactions committed together at most
GROUP_AGE = 0.005  # seconds: a group older than this commits at its next member's end
ORPHAN_CHECK = 0.05  # seconds: how often a waiting member makes sure someone will commit
_DEFERRED_FKS = apsw.SQLITE_DBSTATUS_DEFERRED_FKS
_UNDO = "ROLLBACK TO alkstore_tx; RELEASE alkstore_tx"


class _Group:
    """One open SQLite transaction and the members that ended in it."""

    __slots__ = ("born", "done", "error", "members")

    def __init__(self) -> None:
        self.born = time.monotonic()
        self.done = threading.Lock()  # held until the group ends (cheaper than an Event)
        self.done.acquire()
        self.error: BaseException | None = None
        self.members = 0  # ended without an exception: their writes wait for the commit


class Committer:
    """An engine's writer connection, its turn and its open group (one per engine)."""

    def __init__(self, engine: SqliteEngine) -> None:
        self._engine = engine
        self._turn = threading.Lock()
        self._waiting: set[int] = set()  # threads waiting for the turn (set ops hold the GIL)
        self._conn: apsw.Connection | None = None
        self._group: _Group | None = None
        _COMMITTERS.add(self)

    def _take(self) -> None:
        ident = threading.get_ident()
        self._waiting.add(ident)
        try:
            taken = self._turn.acquire(timeout=_busy.WRITERS_WAIT)
        finally:
            self._waiting.discard(ident)
        if not taken:
            raise _errors.DatabaseBusy(
                "another thread of this process held a write transaction for "
                f"{_busy.WRITERS_WAIT:g} s"
            )

    def _begin(self) -> tuple[apsw.Connection, _Group, bool]:
        """With the turn: the open group and a savepoint in it (joined), or a new group
        (BEGIN IMMEDIATE: its first member needs no savepoint)."""
        engine = self._engine
        conn = self._conn
        if conn is None:
            conn = self._conn = engine._open()
        group = self._group
        if group is not None and engine.gate.waiting:  # a lease renewal goes first
            self._commit(group)
            group = None
        if group is None:
            if engine.gate.waiting:
                engine.gate.hold(_busy.BUSY_TIMEOUT)
            _begin(conn, engine.namespace)
            group = self._group = _Group()
            return conn, group, False
        try:
            conn.execute("SAVEPOINT alkstore_tx")
        except apsw.Error as exc:
            error = _storage_error(conn, engine.namespace, exc)
            self._fail(group, error)
            raise error from exc
        return conn, group, True

    def _end(self, group: _Group, ok: bool, joined: bool) -> tuple[BaseException | None, bool]:
        """With the turn: end a member (`ok`: keep its writes). Returns the member's own
        error (its writes are gone) and whether it handed the open group on."""
        conn = self._conn
        assert conn is not None
        error: BaseException | None = None
        try:
            if ok and conn.status(_DEFERRED_FKS)[0]:  # COMMIT would fail for every member
                ok = False
                error = _errors.StorageError(
                    "FOREIGN KEY constraint failed (a deferred foreign key of this transaction)"
                )
            if ok:
                group.members += 1
            elif conn.in_transaction:  # the first member's writes are all there is
                conn.execute(_UNDO if joined else "ROLLBACK")
            still_open = conn.in_transaction
            if still_open and self._hand_on(group):
                if ok and joined:
                    conn.execute("RELEASE alkstore_tx")
                return error, True
        except apsw.Error as exc:  # the connection broke (or the store was closed)
            error = _storage_error(conn, self._engine.namespace, exc)
            self._fail(group, error)
            return error, False
        if still_open:
            self._commit(group)  # COMMIT ends the open savepoint too
        elif group.members:  # SQLite rolled back (an I/O error, a full disk): everyone's
            self._fail(group, error or _errors.StorageError("SQLite rolled the transaction back"))
        else:
            self._close(group)
        return error, False

    def _hand_on(self, group: _Group) -> bool:
        """With the turn: leave the group open for a thread that waits for the turn?"""
        return bool(
            self._waiting
            and group.members
            and group.members < GROUP_MAX
            and time.monotonic() - group.born < GROUP_AGE
        )

    def _commit(self, group: _Group) -> None:
        """With the turn: COMMIT the group (ROLLBACK when no member kept writes)."""
        conn = self._conn
        assert conn is not None
        try:
            if group.members:
                _busy.execute(conn, "COMMIT")
            else:
                conn.execute("ROLLBACK")
        except apsw.Error as exc:
            group.error = _storage_error(conn, self._engine.namespace, exc)
            _rollback(conn)
        self._close(group)

    def _fail(self, group: _Group, error: BaseException) -> None:
        if self._conn is not None:
            _rollback(self._conn)
        group.error = error
        self._close(group)

    def _close(self, group: _Group) -> None:
        if self._group is group:
            self._group = None
            group.done.release()

    def _wait(self, group: _Group) -> None:
        """Without the turn: until the group ended. A thread that waited for the turn
        takes it and ends the group; if none did (it timed out), end it here."""
        while not group.done.acquire(timeout=ORPHAN_CHECK):
            if self._turn.acquire(blocking=False):
                try:
                    if self._group is group:
                        self._commit(group)
                finally:
                    self._turn.release()
        group.done.release()  # for the other members

    def after_fork(self) -> None:
        """In a child process: a fresh turn; the parent's connection is not ours to use."""
        self._turn = threading.Lock()
        self._waiting = set()
        if self._conn is not None:
            _INHERITED.append(self._conn)  # closing it here could disturb the parent's locks
        self._conn = None
        self._group = None


class Member:
    """`engine.transaction()` on a file: the thread's turn, then BEGIN IMMEDIATE or a
    savepoint in the open group; at the end the group's commit."""

    __slots__ = ("_committer", "_group", "_joined", "_saved")

    def __init__(self, committer: Committer) -> None:
        self._committer = committer

    def __enter__(self) -> apsw.Connection:
        committer = self._committer
        engine = committer._engine
        local = engine._local
        saved: apsw.Connection | None = getattr(local, "conn", None)
        if saved is not None and saved is committer._conn:
            raise _errors.TransactionOpen()
        if engine._is_closed:
            raise _errors.AlkstoreError("the store is closed")
        committer._take()
        try:
            conn, self._group, self._joined = committer._begin()
        except BaseException:
            committer._turn.release()
            raise
        self._saved = saved
        local.conn = conn  # this thread's reads and `run` see the transaction (TransactionOpen)
        return conn

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        committer = self._committer
        committer._engine._local.conn = self._saved
        group = self._group
        try:
            error, handed = committer._end(group, exc_type is None, self._joined)
        finally:
            committer._turn.release()
        if exc_type is not None:
            return  # the block's exception goes on; its writes were rolled back
        if error is not None:
            raise error
        if handed:
            committer._wait(group)
            if group.error is not None:
                raise _again(group.error) from group.error
        elif group.error is not None:
            raise group.error


def _rollback(conn: apsw.Connection) -> None:
    """ROLLBACK if a transaction is open; a closed or broken connection commits nothing."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except apsw.Error:
        pass


def _again(error: BaseException) -> BaseException:
    """The group's error once more, for another member (not through __init__, which
    some of ours use to build the message)."""
    again = type(error).__new__(type(error))
    again.args = error.args
    again.__dict__.update(error.__dict__)
    return again


_COMMITTERS: weakref.WeakSet[Committer] = weakref.WeakSet()
_INHERITED: list[apsw.Connection] = []


def _after_fork() -> None:
    for committer in list(_COMMITTERS):
        committer.after_fork()


os.register_at_fork(after_in_child=_after_fork)
