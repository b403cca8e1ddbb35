"""The SQLite engine, through apsw.

Connections, for a file: one per thread for reads and the one-statement transactions
of `run` (claims, acks, enqueues; WAL mode lets readers run beside the single writer),
and one writer connection for store transactions, committed in groups (`_group`, ADR
0028); for `:memory:`, one shared connection behind a lock.
Write transactions start with BEGIN IMMEDIATE so a writer never fails on a
read-to-write upgrade; a busy handler that retries every few milliseconds
(`_busy`) plus a jittered tenacity retry keeps "database is locked" away from
user code.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Literal

import apsw

from alkstore import _engine, _errors, _events, _sql, _wake
from alkstore.sqlite import _busy, _group, _seam, _watch
from alkstore.sqlite._seam import begin as _begin
from alkstore.sqlite._seam import positional
from alkstore.sqlite._seam import storage_error as _storage_error
from alkstore.sqlite._seam import table_exists as _table_exists
from alkstore.sqlite._seam import translate as _translate

_PACKAGE = "alkstore.sqlite"
SWEEP_LOCK_TTL_MS = 60_000  # a crashed sweeper's lock row expires after this
_UNIQUE = apsw.mapping_extended_result_codes["SQLITE_CONSTRAINT_UNIQUE"]
BULK_MIN = 8  # jobs from which insert_jobs beats one INSERT per job (docs/adr/0013)


def _datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class SqliteEngine:
    """`alkstore.Engine` on one SQLite database file (or `:memory:`)."""

    def __init__(self, path: str, namespace: str) -> None:
        self._path = path
        self._namespace = namespace
        self._memory = path == ":memory:"
        self._q = _sql.queries(_PACKAGE, namespace)
        self._positional = {name: positional(query) for name, query in self._q.items()}
        self._local = threading.local()
        self._shared_lock = threading.RLock()
        self._all: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()  # freed with threads
        self._all_lock = threading.Lock()
        self._wake = _wake.Wake()
        self.gate = _busy.Gate()
        self.committer = _group.Committer(self)  # store transactions on a file (ADR 0028)
        self._watcher: _watch.Watcher | None = None
        self._closed = threading.Event()
        self._is_closed = False  # the same, read on the hot path without a call
        self.bulk_min = BULK_MIN
        if not self._memory:
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(directory):
                raise _errors.InvalidURL(f"sqlite:///{path}", f"no such directory {directory}")
        try:
            with self._connection() as conn, _translate(conn, namespace):
                if not self._memory:
                    conn.execute("PRAGMA journal_mode = WAL")
                _sql.check_version(_PACKAGE, _version(conn, namespace))  # a newer alkstore's?
        except BaseException:
            self.close()
            raise

    @property
    def name(self) -> Literal["sqlite"]:
        return "sqlite"

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def wake(self) -> _wake.Wake:
        self._start_watcher()
        return self._wake

    # -- connections -----------------------------------------------------------------

    def _open(self, *, reserved: bool = False) -> apsw.Connection:
        try:
            conn = apsw.Connection(self._path)
        except apsw.Error as exc:
            message = f"cannot open SQLite database {self._path!r}: {exc}"
            raise _errors.StorageError(message) from exc
        _seam.configure(conn, None if reserved else self.gate)
        with self._all_lock:
            self._all.add(conn)
        return conn

    @contextmanager
    def _connection(self) -> Iterator[apsw.Connection]:
        if self._closed.is_set():
            raise _errors.AlkstoreError("the store is closed")
        if self._memory:
            with self._shared_lock:
                conn = getattr(self, "_shared", None)
                if conn is None:
                    conn = self._shared = self._open()
                yield conn
            return
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        yield conn

    @contextmanager
    def _idle(self) -> Iterator[apsw.Connection]:
        """This thread's connection for a read of our tables, outside a store transaction
        (inside one the store is used through `tx`: docs/adr/0016)."""
        with self._connection() as conn:
            if conn.in_transaction:
                raise _errors.TransactionOpen()
            yield conn

    def transaction(self) -> AbstractContextManager[apsw.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: on a file, in this process's group of store
        transactions (`_group`, ADR 0028); in memory, on the shared connection."""
        if self._memory:
            return self._transaction()
        return _group.Member(self.committer)

    @contextmanager
    def _transaction(self) -> Iterator[apsw.Connection]:
        with self._connection() as conn:
            if conn.in_transaction:
                raise _errors.TransactionOpen()
            _begin(conn, self._namespace)
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            try:
                _busy.execute(conn, "COMMIT")
            except apsw.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise _storage_error(conn, self._namespace, exc) from exc

    def committed(self) -> None:
        """Our own transaction committed: the watcher sees files; memory needs a direct fire."""
        if self._memory:
            self._wake.fire()

    # -- schema ----------------------------------------------------------------------

    def _pending(self, conn: apsw.Connection) -> list[tuple[int, str, str]]:
        applied: set[int] = set()
        if _table_exists(conn, f"{self._namespace}__schema_migrations"):
            applied = {row[0] for row in conn.execute(self._q["applied_versions"])}
        _sql.check_version(_PACKAGE, max(applied, default=None))
        return [m for m in _sql.migrations(_PACKAGE, self._namespace) if m[0] not in applied]

    def migrate(self) -> list[int]:
        done = []
        with self.transaction() as conn:  # BEGIN IMMEDIATE: one migrating process at a time
            conn.execute(self._q["create_migrations_table"])
            for version, name, ddl in self._pending(conn):
                conn.execute(ddl)
                conn.execute(self._q["record_migration"], (version, name))
                done.append(version)
        return done

    def pending(self) -> list[int]:
        with self._idle() as conn, _translate(conn, self._namespace):
            return [version for version, _, _ in self._pending(conn)]

    def ddl(self, *, pending_only: bool) -> str:
        if pending_only:
            with self._idle() as conn:
                todo = self._pending(conn)
            if not todo:
                return ""
        else:
            todo = _sql.migrations(_PACKAGE, self._namespace)
        parts = [self._q["create_migrations_table"] + ";"]
        record = self._q["record_migration"]
        for version, name, ddl in todo:  # each records itself: `migrate` sees it applied
            done = _sql.recorded(record, version, name)
            parts.append(f"-- migration {version:04d}_{name}\n{ddl.strip()}\n{done}")
        return "\n\n".join(parts) + "\n"

    def grants(self, roles: Mapping[str, str]) -> str:
        raise _errors.InvalidArgument(
            "GRANTs are PostgreSQL's: SQLite has no roles (its file's permissions decide)"
        )

    # -- the log ---------------------------------------------------------------------

    def insert_events(self, conn: Any, rows: Sequence[_engine.EventRow]) -> None:
        try:  # insert_rows, inlined: this is the append hot path
            if len(rows) == 1:
                conn.execute(self._q["insert_event"], rows[0])
            else:
                conn.executemany(self._q["insert_event"], rows)
        except apsw.Error as exc:
            raise _storage_error(conn, self._namespace, exc) from exc

    def read(self, after: int, limit: int) -> list[_engine.LogEntry]:
        decode_headers = _events.codec.decode_headers
        with self._idle() as conn, _translate(conn, self._namespace):
            cursor = conn.execute(self._q["read_events"], (after, limit))
            return [
                _engine.LogEntry(pos, typ, key, decode_headers(hdr), payload, _datetime(at))
                for pos, typ, key, hdr, payload, at in cursor
            ]

    def head(self) -> int:
        with self._idle() as conn, _translate(conn, self._namespace):
            value = conn.execute(self._q["head"]).fetchall()[0][0]
            assert isinstance(value, int)
            return value

    def sequence(self) -> None:
        """Nothing to do: one writer at a time makes rowid order commit order."""

    def holdups(self) -> list[tuple[int, float, str, str]]:
        return []

    def hidden_holdups(self) -> int:
        return 0

    def backlog(self) -> tuple[int, tuple[int, float, str, str] | None]:
        """Nothing waits for a position: rowid order is commit order."""
        return 0, None

    # -- queues ----------------------------------------------------------------------

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        # The hot path (claim, ack, enqueue): one flat BEGIN IMMEDIATE ... COMMIT on this
        # thread's connection, without the context managers of transaction(), and outside
        # the group commit of store transactions (ADR 0028): these wait in the busy handler.
        if self._memory or self._is_closed:
            with self.transaction() as begun:
                return self.run_in(begun, name, params)
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        if conn.in_transaction:  # inside a store transaction: the writer connection
            raise _errors.TransactionOpen()
        query, bind = self._positional[name]
        if self.gate.waiting:
            self.gate.hold(_busy.BUSY_TIMEOUT)
        _begin(conn, self._namespace)
        return _run_begun(conn, self._namespace, query, bind, params)

    def run_in(self, conn: Any, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        query, bind = self._positional[name]
        try:  # _translate, inlined: tx.enqueue's hot path
            rows: list[tuple[Any, ...]] = conn.execute(
                query, params if bind is None else bind(params)
            ).fetchall()
        except apsw.Error as exc:
            raise _storage_error(conn, self._namespace, exc) from exc
        return rows

    def ack_in(self, conn: Any, job_id: int, token: int | None) -> bool:
        """job.transaction()'s ack (ADR 0022): the DELETE, in the open transaction."""
        return bool(self.run_in(conn, "ack_fenced", {"id": job_id, "token": token}))

    def run_many_in(
        self, conn: Any, name: str, params_seq: Sequence[dict[str, Any]]
    ) -> list[list[tuple[Any, ...]]]:
        return [self.run_in(conn, name, params) for params in params_seq]

    def insert_jobs(
        self,
        conn: Any,
        rows: Sequence[_engine.JobRow] | Sequence[_engine.GroupedRow],
        *,
        grouped: bool = False,
    ) -> list[int]:
        """One executemany of a positional INSERT (RETURNING: one id per row, in order).
        A dedupe key a live job holds: KeyTaken (the caller rolls back)."""
        query = self._q["bulk_insert_grouped" if grouped else "bulk_insert"]
        try:
            return [row[0] for row in conn.executemany(query, rows)]
        except apsw.ConstraintError as exc:
            if getattr(exc, "extendedresult", None) == _UNIQUE:  # jobs has one: dedupe keys
                raise _engine.KeyTaken() from exc
            raise _storage_error(conn, self._namespace, exc) from exc
        except apsw.Error as exc:
            raise _storage_error(conn, self._namespace, exc) from exc

    def now_ms(self) -> int:
        with self._connection() as conn, _translate(conn, self._namespace):
            value = conn.execute(self._q["db_now"], {"now": None}).fetchall()[0][0]
            assert isinstance(value, int)
            return value

    def reserved(self) -> _Reserved:
        return _Reserved(self)

    @contextmanager
    def sweep_lock(self, now_ms: int | None) -> Iterator[bool]:
        """A lease row in the locks table (SQLite has no advisory locks)."""
        holder = f"{os.getpid()}:{id(self)}:{threading.get_ident()}"
        params = {"name": "sweep", "holder": holder, "now": now_ms, "ttl_ms": SWEEP_LOCK_TTL_MS}
        rows = self.run("lock_acquire", params)
        try:
            yield bool(rows)
        finally:
            if rows:
                self.run("lock_release", {"name": "sweep", "holder": holder, "token": rows[0][0]})

    # -- wake ------------------------------------------------------------------------

    def _start_watcher(self) -> None:
        if self._memory or self._watcher is not None:
            return
        with self._all_lock:
            if self._watcher is None:
                self._watcher = _watch.Watcher(self._path, self._wake.fire)

    def close(self) -> None:
        self._is_closed = True
        self._closed.set()
        if self._watcher is not None:
            self._watcher.stop()
        with self._all_lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for conn in conns:
            conn.close()


class _Reserved:
    """A connection of its own, first in line for the write lock (`_busy.Gate`)."""

    def __init__(self, engine: SqliteEngine) -> None:
        self._engine = engine
        self._conn: apsw.Connection | None = None

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        engine = self._engine
        if engine._memory:
            return engine.run(name, params)  # one shared connection: nothing to reserve
        if engine._is_closed:
            raise _errors.AlkstoreError("the store is closed")
        if self._conn is None:
            self._conn = engine._open(reserved=True)
        conn = self._conn
        query, bind = engine._positional[name]
        engine.gate.enter()
        try:
            _busy.execute(conn, "BEGIN IMMEDIATE")
        except apsw.Error as exc:
            raise _storage_error(conn, engine.namespace, exc) from exc
        finally:
            engine.gate.leave()
        return _run_begun(conn, engine.namespace, query, bind, params)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _run_begun(
    conn: apsw.Connection,
    namespace: str,
    query: str,
    bind: _sql.Binder | None,
    params: dict[str, Any],
) -> list[tuple[Any, ...]]:
    """Run one query in the write transaction just begun on `conn`, and commit it."""
    try:
        rows: list[tuple[Any, ...]] = conn.execute(
            query, params if bind is None else bind(params)
        ).fetchall()
        _busy.execute(conn, "COMMIT")
    except apsw.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise _storage_error(conn, namespace, exc) from exc
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return rows


def _version(conn: apsw.Connection, namespace: str) -> int | None:
    """The newest migration recorded in the database (None: not migrated)."""
    if not _table_exists(conn, f"{namespace}__schema_migrations"):
        return None
    value = conn.execute(_sql.queries(_PACKAGE, namespace)["schema_version"]).fetchall()[0][0]
    return None if value is None else int(value)
