"""The PostgreSQL engine, through psycopg 3.

Commit order: appenders insert rows without a position; `sequence_events`
(SQL, under an advisory lock only sequencers take) numbers rows after they
commit. Readers sequence before they read. See docs/adr/0004.

Wakes: a LISTEN thread feeds the store's Wake; NOTIFYs are sent by
`_notify.Notifier`, never inside an application transaction.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, LiteralString

import psycopg

from alkstore import _engine, _errors, _events, _sql, _wake
from alkstore.postgres import (
    _conn,
    _grants,
    _listen,
    _notify,
    _owned,
    _pool,
    _prepared,
    _session,
    _sqlstate,
)

log = logging.getLogger("alkstore.postgres")

_PACKAGE = "alkstore.postgres"
SEQUENCE_BATCH = 5_000
COPY_EVENTS_MIN = 32  # events from which append_many COPYs (docs/adr/0013)
BULK_MIN = 32  # jobs from which insert_jobs (COPY) beats one INSERT per job (docs/adr/0013)
# Planned on every run, never prepared: a generic plan made while the jobs table was
# small scans it whole once it is not (bulk_start's key lookup took 11 ms, not 0.3). A
# queue's jobs by state (listing.sql) too: the generic plan walks the primary key whatever
# the queue, 550 ms beside a million jobs none of which is in that state, not 40.
CUSTOM = frozenset(
    {
        "bulk_start",
        "jobs_list",
        "jobs_list_ready",
        "jobs_list_running",
        "jobs_list_scheduled",
        "jobs_list_expired",
    }
)
FENCE_STATE = "22012"  # division_by_zero: the fenced ack deleted nothing (effects.sql)
PREPARED = ("enqueue", "enqueue_dedupe")  # hot one-statement queries run on libpq (_prepared)
CLOSE_WAIT = 2.0  # seconds close() waits for the notifier's last NOTIFY and the listener

_translated = _sqlstate.translated


class PostgresEngine:
    """`alkstore.Engine` on one PostgreSQL database; the namespace is a schema."""

    def __init__(
        self,
        url: str,
        namespace: str,
        *,
        pool_size: int = 10,
        connect_timeout: float = _pool.DEFAULT_CONNECT_TIMEOUT,
        pooler: bool | None = None,
        listen_url: str | None = None,
    ) -> None:
        """`connect_timeout` (seconds) bounds every connection attempt of the pool, the
        notifier and the listener; a `connect_timeout` in the URL wins. `pooler`: the URL
        goes through a connection pooler in transaction mode (None: the URL's `pooler=`
        parameter, else detected); `listen_url`: a direct URL for LISTEN (docs/adr/0020)."""
        url, url_pooler = _pool.split_pooler(url)
        # the connect timeout and TCP keepalives for every connection we open
        self._conninfo = _pool.conninfo(url, connect_timeout)
        self._namespace = namespace
        self._q = _sql.queries(_PACKAGE, namespace)
        server = _session.probe(self._conninfo, self._q["session_probe"])
        self.role = server.user  # for the message of a denied privilege
        self.pooler = next(v for v in (pooler, url_pooler, server.pooled) if v is not None)
        """True: behind a connection pooler; nothing is left on a session (docs/adr/0020)."""
        if self.pooler:
            _session.check_pooled(server)
        if listen_url is not None:
            listen_conninfo: str | None = _pool.conninfo(
                _pool.split_pooler(listen_url)[0], connect_timeout
            )
        else:
            listen_conninfo = None if self.pooler else self._conninfo
        self._sessions = _session.Sessions(self.pooler, self._q["read_committed"])
        self._url = self._conninfo  # what the reserved (lease renewal) connection opens
        self._append_name = f"_alkstore_append_{namespace}".encode()
        self._append_sql = self._q["append_event"].encode()
        # behind a pooler they run unnamed (_conn.Connection.unnamed), on libpq all the same
        self._prepared = _prepared.statements(self._q, PREPARED, namespace)
        self._fenced = _prepared.statements(self._q, ("ack_fenced",), namespace).get("ack_fenced")
        self.bulk_min = BULK_MIN
        self.copy_min = COPY_EVENTS_MIN
        # at least 2: the sweep holds one connection while using another
        self._pool = _pool.Pool(self._conninfo, max(2, pool_size), self._sessions.configure)
        self._wake = _wake.Wake()
        self._closed = threading.Event()
        self._listening = _listen.Listening(
            listen_conninfo,
            self._conninfo,
            self._q["listen"],
            self._q["listen_probe"],
            self._wake,
            self._closed,
        )
        self._listener: threading.Thread | None = None
        self._lock = threading.Lock()
        self._in_tx = threading.local()  # .open: a store transaction on this thread
        try:
            with self._pool.connection() as conn:
                key = _notify.conn_key(namespace, conn)
                with self._translate():
                    _sql.check_version(
                        _PACKAGE, _owned.version(conn, self._q)
                    )  # a newer alkstore's?
        except BaseException:
            self._pool.close()
            raise
        self.notifier = _notify.Notifier(self._conninfo, self._q["notify"], self._closed, key)

    def _translate(self, operation: str | None = None) -> contextlib.AbstractContextManager[None]:
        return _sqlstate.translate(operation, self.role)

    @property
    def name(self) -> Literal["postgres"]:
        return "postgres"

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def wake(self) -> _wake.Wake:
        if self._listener is None:
            with self._lock:
                if self._listener is None:
                    self._listener = _listen.start(self._listening.run)
        return self._wake

    @contextmanager
    def connection(self) -> Iterator[_conn.Connection]:
        """A pooled autocommit connection, outside a store transaction on this thread
        (inside one the store is used through `tx`: docs/adr/0016)."""
        if self._closed.is_set():
            raise _errors.AlkstoreError("the store is closed")
        if getattr(self._in_tx, "open", False):
            raise _errors.TransactionOpen()
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[_conn.Connection]:
        """BEGIN ... COMMIT on a pooled connection; events ride with COMMIT (_conn).

        Errors of the application's own statements pass through unchanged; a failing
        BEGIN or COMMIT (or event INSERT) is a StorageError or NotMigrated, and a
        failing ROLLBACK never hides the exception that caused it. Until it ends, the
        engine's other calls on this thread raise TransactionOpen (docs/adr/0016)."""
        with self.connection() as conn:
            with self._translate():
                conn.begin()
            self._in_tx.open = True
            try:
                try:
                    yield conn
                except BaseException:
                    conn.rollback_store()
                    raise
                try:
                    with self._translate():
                        conn.commit_store()
                except _errors.StorageError as exc:
                    if conn.fenced_ack and conn.failed_state == FENCE_STATE:
                        raise _engine.AckRefused(str(exc)) from exc
                    raise
            finally:
                self._in_tx.open = False
                conn.fenced_ack = False

    def committed(self) -> None:
        """Our own transaction committed something: wake listeners everywhere."""
        self.notifier.committed()

    # -- schema ----------------------------------------------------------------------

    def _pending(self, conn: psycopg.Connection[Any]) -> list[tuple[int, str, LiteralString]]:
        applied: set[int] = set()
        exists = conn.execute(self._q["migrations_table_exists"]).fetchone()
        if exists and exists[0]:
            applied = {row[0] for row in conn.execute(self._q["applied_versions"])}
        _sql.check_version(_PACKAGE, max(applied, default=None))
        return [m for m in _sql.migrations(_PACKAGE, self._namespace) if m[0] not in applied]

    def migrate(self) -> list[int]:
        """Apply what is pending. With nothing pending it reads and creates nothing, so a
        role without CREATE privileges can run it (docs/adr/0020)."""
        done = []
        with self.transaction() as conn, self._translate():
            conn.execute(self._q["lock_migrations"])  # one migrating process at a time
            schema, table = self._state(conn)
            if not schema:
                conn.execute(self._q["create_schema"])
            if not table:
                conn.execute(self._q["create_migrations_table"])
            for version, name, ddl in self._pending(conn):
                conn.execute(ddl)
                conn.execute(self._q["record_migration"], (version, name))
                done.append(version)
        return done

    def _state(self, conn: psycopg.Connection[Any]) -> tuple[bool, bool]:
        """(the namespace's schema exists, its schema_migrations table exists)"""
        row = conn.execute(self._q["schema_state"]).fetchone()
        return (bool(row[0]), bool(row[1])) if row else (False, False)

    def pending(self) -> list[int]:
        with self.connection() as conn, self._translate():
            return [version for version, _, _ in self._pending(conn)]

    def ddl(self, *, pending_only: bool) -> str:
        """The DDL, each migration followed by the INSERT that records it: applied by hand
        (psql), `migrate` and `sql --pending` then find nothing to do (docs/adr/0020)."""
        schema = table = False
        if pending_only:
            with self.connection() as conn, self._translate():
                todo = self._pending(conn)
                schema, table = self._state(conn)
            if not todo:
                return ""
        else:
            todo = _sql.migrations(_PACKAGE, self._namespace)
        parts = [] if schema else [self._q["create_schema"] + ";"]
        if not table:
            parts.append(self._q["create_migrations_table"] + ";")
        for version, name, ddl in todo:
            done = _sql.recorded(self._q["record_migration"], version, name)
            parts.append(f"-- migration {version:04d}_{name}\n{ddl.strip()}\n{done}")
        return "\n\n".join(parts) + "\n"

    def grants(self, roles: Mapping[str, str]) -> str:
        with self.connection() as conn:
            dbname = conn.info.dbname
        version = _sql.latest_version(_PACKAGE)
        return _grants.grants(self._namespace, dbname, roles, version)

    # -- the log ---------------------------------------------------------------------

    def insert_events(self, conn: Any, rows: Sequence[_engine.EventRow]) -> None:
        """Inside `transaction()`: sent now, the reply read with COMMIT's (see _conn); from
        `copy_min` events on, one COPY (docs/adr/0013), which reads the replies in flight
        first and raises its own error here."""
        if len(rows) >= self.copy_min and conn.can_pipeline:
            with self._translate(), conn.cursor().copy(self._q["copy_events"]) as copy:
                write = copy.write_row
                for row in rows:
                    write(row)
        elif conn.can_pipeline:
            conn.append(self._append_name, self._append_sql, rows)
        else:  # an old libpq, or inside the application's own psycopg pipeline
            _owned.insert(conn, self._q["insert_event"], rows)

    def sequence(self) -> None:
        with self.connection() as conn, self._translate():
            while self._sequence(conn) == SEQUENCE_BATCH:
                pass

    def holdups(self) -> list[tuple[int, float, str, str]]:
        """Writing transactions open in this database, oldest first: (pid, age s, state, query).

        They never stall the log (ADR 0004); their events appear when they commit. One
        that began under a second ago and is running a statement is work in flight (a
        claim), not listed; nor is a session this role may not see (`hidden_holdups`)."""
        with self.connection() as conn, self._translate():
            return conn.execute(self._q["oldest_writers"]).fetchall()

    def hidden_holdups(self) -> int:
        """Writing transactions of other roles, whose start and query this role may not see
        without pg_read_all_stats (docs/adr/0020)."""
        with self.connection() as conn, self._translate():
            row = conn.execute(self._q["hidden_writers"]).fetchone()
            return int(row[0]) if row else 0

    def backlog(self) -> tuple[int, tuple[int, float, str, str] | None]:
        """(committed events no reader numbered yet, the oldest open transaction that
        appended events to this namespace) — ADR 0004: nothing waits for them, but an
        operator asking "where is my event?" sees them."""
        with self.connection() as conn, self._translate():
            row = conn.execute(self._q["unsequenced"]).fetchone()
            appender = conn.execute(self._q["oldest_appender"]).fetchone()
            return (int(row[0]) if row else 0), appender

    def _sequence(self, conn: psycopg.Connection[Any], batch: int = SEQUENCE_BATCH) -> int:
        """Number committed events; returns how many got a position."""
        row = conn.execute(self._q["sequence_events"], (batch,)).fetchone()
        return int(row[0]) if row else 0

    def read(self, after: int, limit: int) -> list[_engine.LogEntry]:
        decode_headers = _events.codec.decode_headers
        with self.connection() as conn, self._translate():
            # enough numbered to fill `limit`, SEQUENCE_BATCH rows per statement at most
            todo = limit
            while self._sequence(conn) == SEQUENCE_BATCH and todo > SEQUENCE_BATCH:
                todo -= SEQUENCE_BATCH
            cursor = conn.execute(self._q["read_events"], (after, limit))
            return [
                _engine.LogEntry(pos, typ, key, decode_headers(hdr), payload, at)
                for pos, typ, key, hdr, payload, at in cursor
            ]

    def head(self) -> int:
        with self.connection() as conn, self._translate():
            while self._sequence(conn) == SEQUENCE_BATCH:
                pass
            row = conn.execute(self._q["head"]).fetchone()
            return int(row[0]) if row else 0

    # -- queues ----------------------------------------------------------------------

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        # The hot path (claim, ack, enqueue): one autocommit statement on a pooled
        # connection, without the context managers of connection() and translate(),
        # and on psycopg's own cursor: outside a store transaction nothing is in
        # flight, and our queries never make psycopg drop its prepared statements.
        # The PREPARED ones skip psycopg's execute and go to libpq (_prepared).
        if self._closed.is_set():
            raise _errors.AlkstoreError("the store is closed")
        if getattr(self._in_tx, "open", False):
            raise _errors.TransactionOpen()
        conn = self._pool.get()
        try:
            statement = self._prepared.get(name)
            if statement is not None:
                return statement.run(conn, params)
            prepare = False if name in CUSTOM else None
            cursor = psycopg.Cursor(conn).execute(self._q[name], params, prepare=prepare)
            return cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            raise _translated(exc, name, self.role) from exc
        finally:
            self._pool.put(conn)

    def run_in(self, conn: Any, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        statement = self._prepared.get(name)
        if statement is not None and conn.can_run_in:  # tx.enqueue: on libpq (_conn)
            try:
                return statement.run_in(conn, params)
            except psycopg.Error as exc:
                raise _translated(exc, name, self.role) from exc
        prepare = False if name in CUSTOM else None
        with self._translate(name):
            if conn.pgconn.pipeline_status:  # the application's pipeline: a nested block's
                with conn.pipeline():  # exit syncs, so the reply is there to read
                    cursor = conn.execute(self._q[name], params, prepare=prepare)
            else:
                cursor = conn.execute(self._q[name], params, prepare=prepare)
            return cursor.fetchall() if cursor.description else []

    def ack_in(self, conn: Any, job_id: int, token: int | None) -> bool | None:
        """job.transaction()'s ack (ADR 0022): queued to go with COMMIT in one pipeline
        (None: COMMIT raises AckRefused if it deleted nothing); where the connection cannot
        pipeline (an old libpq, the application's own pipeline), a DELETE awaited now."""
        statement = self._fenced
        if statement is not None and conn.can_pipeline and conn.in_store_transaction:
            conn.append(statement.name, statement.sql, [[str(job_id), str(token)]])
            conn.fenced_ack = True
            return None
        return bool(self.run_in(conn, "ack", {"id": job_id, "token": token}))

    def run_many_in(
        self, conn: Any, name: str, params_seq: Sequence[dict[str, Any]]
    ) -> list[list[tuple[Any, ...]]]:
        """One psycopg executemany (pipelined: one round trip for the batch)."""
        if not params_seq:
            return []
        with self._translate(name):
            cursor = conn.cursor()
            cursor.executemany(self._q[name], params_seq, returning=True)
            results = [cursor.fetchall() if cursor.description else []]
            while cursor.nextset():
                results.append(cursor.fetchall() if cursor.description else [])
            return results

    def insert_jobs(
        self,
        conn: Any,
        rows: Sequence[_engine.JobRow] | Sequence[_engine.GroupedRow],
        *,
        grouped: bool = False,
    ) -> list[int]:
        """COPY the rows into the jobs table; their ids are the identity default's, in
        input order. COPY returns none: when no other session took an id meanwhile they
        are the range between the sequence's value before and after, else they are read
        back through the primary key. A dedupe key a live job holds: KeyTaken (the
        caller rolls back)."""
        q = self._q
        try:
            first = conn.execute(q["bulk_id_before"], prepare=False).fetchone()[0]
            with conn.cursor().copy(q["bulk_insert_grouped" if grouped else "bulk_insert"]) as copy:
                write = copy.write_row
                for row in rows:
                    write(row)
            last = conn.execute(q["bulk_id_after"], prepare=False).fetchone()[0]
            if last - first == len(rows):
                return list(range(first + 1, last + 1))
            span = {"first": first, "last": last}
            return [row[0] for row in conn.execute(q["bulk_ids"], span, prepare=False)]
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name == "jobs_dedupe":
                raise _engine.KeyTaken() from exc
            raise _translated(exc, None, self.role) from exc
        except psycopg.Error as exc:
            raise _translated(exc, None, self.role) from exc

    def now_ms(self) -> int:
        """The server's clock (allowed inside a store transaction: it reads no table)."""
        if self._closed.is_set():
            raise _errors.AlkstoreError("the store is closed")
        with self._pool.connection() as conn, self._translate():
            row = conn.execute(self._q["db_now"], {"now": None}).fetchone()
            assert row is not None
            return int(row[0])

    def reserved(self) -> _session.Reserved:
        return _session.Reserved(self._url, self._q, self._closed, self._sessions, self.role)

    @contextmanager
    def sweep_lock(self, now_ms: int | None) -> Iterator[bool]:
        """A transaction-level advisory lock, held by a transaction that does nothing else
        on its own pooled connection while the sweep's batches run on others: the end of
        that transaction or of its session releases it (ADR 0006 addendum 2026-12-01)."""
        with self.connection() as conn:
            with self._translate():
                conn.begin()
                try:
                    row = conn.execute(self._q["sweep_try_lock"]).fetchone()
                except BaseException:
                    conn.rollback_store()
                    raise
            try:
                yield bool(row and row[0])
            finally:
                try:  # COMMIT, not ROLLBACK: psycopg's rollback deallocates prepared statements
                    conn.commit_store()
                except (psycopg.Error, _errors.AlkstoreError) as exc:
                    # the connection broke (the pool drops it): the lock went with its session
                    log.warning("the sweep lock's transaction did not end cleanly: %s", exc)

    # -- wake ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the threads and close idle connections, in at most about CLOSE_WAIT s.

        The notifier's last NOTIFY and the listener get CLOSE_WAIT seconds together;
        on a server that stopped answering they are left to end on their own (daemon
        threads; a connect gives up after the connect timeout, a silent connection
        breaks on its keepalives), so close() never hangs on the network."""
        self._closed.set()
        deadline = time.monotonic() + CLOSE_WAIT
        self.notifier.stop(CLOSE_WAIT)
        if self._listener is not None:
            self._listener.join(max(0.0, deadline - time.monotonic()))
        self._pool.close()
