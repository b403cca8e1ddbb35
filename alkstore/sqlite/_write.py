"""A process's store transactions take turns at a SQLite file's write lock in the process.

Threads of this process whose store transactions (`store.transaction()`,
`job.transaction()`, `migrate`) write to the same database file, through any of its
stores, hold a process-local lock from BEGIN IMMEDIATE to COMMIT or ROLLBACK: they wait
for each other on that lock, one woken as it is released, instead of polling SQLite's
busy handler 0.2-1 ms apart (docs/adr/0001, addendum 2026-12-01b). The busy handler
still decides against other processes, the runtime's one-statement transactions
(`Engine.run`: claims, batched acks; queued, they ran smaller batches), and the reserved
lease-renewal connection, which goes first (`_busy.Gate`, checked after this lock).

- Read transactions do not queue; a nested write on the same thread fails with
  TransactionOpen before it would (the callers check `in_transaction` first).
- A wait lasts as long as a busy one (BUSY_TIMEOUT, then the same jittered retry) and
  ends the same way: apsw.BusyError.
- The automatic WAL checkpoint, which SQLite runs inside COMMIT after its own write lock
  is released, runs after this lock is released (`checkpoint`): other writers go on.
- A forked child starts with every lock free: a lock that a thread of the parent held
  would never be released there.
"""

from __future__ import annotations

import os
import threading
import weakref

import apsw

from alkstore.sqlite import _busy

CHECKPOINT_PAGES = 1000  # SQLite's default wal_autocheckpoint


class WriteLock:
    """The process-local write lock of one database file (see the module docstring)."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _all.add(self)

    def acquire(self) -> None:
        """Wait as BEGIN IMMEDIATE would: BUSY_TIMEOUT, then the jittered retry of
        `_busy.execute`; apsw.BusyError when they run out."""
        if not self._lock.acquire(timeout=_busy.BUSY_TIMEOUT):
            _busy._busy_retrying(self._try)

    def _try(self) -> None:
        if not self._lock.acquire(timeout=_busy.BUSY_TIMEOUT):
            raise apsw.BusyError("database is locked (by a writer of this process)")

    def release(self) -> None:
        self._lock.release()

    def _forked(self) -> None:
        self._lock = threading.Lock()


_all: weakref.WeakSet[WriteLock] = weakref.WeakSet()
_files: weakref.WeakValueDictionary[str, WriteLock] = weakref.WeakValueDictionary()
_files_lock = threading.Lock()


def for_file(path: str) -> WriteLock:
    """The lock of the database file at `path` (one per file: a symlink or a relative
    path to it finds the same one)."""
    key = os.path.realpath(path)
    with _files_lock:
        lock = _files.get(key)
        if lock is None:
            lock = _files[key] = WriteLock()
        return lock


def _after_fork() -> None:
    global _files_lock
    _files_lock = threading.Lock()
    for lock in list(_all):
        lock._forked()


os.register_at_fork(after_in_child=_after_fork)


def begin(conn: apsw.Connection, lock: WriteLock, gate: _busy.Gate) -> None:
    """This process's turn at the write lock, then BEGIN IMMEDIATE (the turn is given
    back if BEGIN fails). The caller calls `end` once the transaction is over."""
    lock.acquire()
    try:
        if gate.waiting:
            gate.hold(_busy.BUSY_TIMEOUT)
        _busy.execute(conn, "BEGIN IMMEDIATE")
    except BaseException:
        lock.release()
        raise


def end(conn: apsw.Connection, lock: WriteLock) -> None:
    """After COMMIT or ROLLBACK: the next writer's turn, then `checkpoint`."""
    lock.release()
    checkpoint(conn)


def checkpoint(conn: apsw.Connection) -> None:
    """The WAL checkpoint that this connection's last commit asked for, if any."""
    if getattr(_due, "conn", None) is conn:
        _due.conn = None
        try:
            conn.wal_checkpoint()  # PASSIVE, as SQLite's automatic checkpoint
        except apsw.Error:
            pass  # as SQLite's: another checkpoint runs, or the next commit tries again


_due = threading.local()  # .conn: the connection whose commit filled the WAL


def wal_hook(conn: apsw.Connection, name: str, pages: int) -> int:
    """Called after each commit on this thread (in place of SQLite's automatic
    checkpoint): note it for `end` once the WAL holds CHECKPOINT_PAGES."""
    if pages >= CHECKPOINT_PAGES:
        _due.conn = conn
    return int(apsw.SQLITE_OK)
