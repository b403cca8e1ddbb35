"""Pooled PostgreSQL connections on which an appended event costs no round trip.

`store.transaction()` runs BEGIN and COMMIT itself, on libpq (psycopg's `pq`
layer). `tx.append` queues an Execute of a prepared INSERT in pipeline mode and
does not wait: it goes out with COMMIT (or the next statement), and its reply
comes back with COMMIT's.
So a business transaction with an event has the round trips of one without it,
and the append costs microseconds of Python instead of a psycopg `execute`
(docs/adr/0010 has the measurements).

Nothing changes for the application's own statements. Before any other use of
the connection it *settles*: it reads the replies still in flight (one round
trip) and leaves pipeline mode, so the application's statements run exactly as
on a plain psycopg connection. Every psycopg operation goes through `wait()`,
and every cursor reads `adapters` when it is made: both settle, so cursors made
by hand (`psycopg.Cursor(tx.connection)`, `ClientCursor`, `RawCursor`,
`ServerCursor`) work as the connection's own do (docs/adr/0016). The server receives
every statement in the order it was sent, so a savepoint rolled back after an
append takes the event with it. The one difference: an error of the INSERT
itself (a namespace that was never migrated, say) is raised by that next use or
by the commit, not by `tx.append`.

psycopg drops every prepared statement of a session (DEALLOCATE ALL) after a
ROLLBACK, DROP, ALTER or DISCARD ALL it runs; the connection watches for those
(and assumes the worst after the application's own pipeline, and after any
statement in a store transaction that did not go through its cursors) and
prepares its INSERT again, in the same pipeline, when it next needs it.
"""

from __future__ import annotations

import re
import select
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self, overload

import psycopg
from psycopg import pq
from psycopg.abc import RV, Params, PQGen, Query, QueryNoTemplate
from psycopg.adapt import AdaptersMap
from psycopg.rows import Row, RowFactory, TupleRow, tuple_row

from alkstore import _errors
from alkstore.postgres import _sqlstate

_DROPS_STATEMENTS = re.compile(r"^(?:DROP|ALTER|ROLLBACK|DISCARD ALL|DEALLOCATE)\b").match
_OK = pq.ExecStatus.COMMAND_OK
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_ROWS_OR_OK = (pq.ExecStatus.TUPLES_OK, _OK)
_SQLSTATE = pq.DiagnosticField.SQLSTATE
_NO_SUCH_STATEMENT = b"26000"  # invalid_sql_statement_name: the statement was deallocated
PIPELINED = psycopg.capabilities.has_pipeline() and psycopg.capabilities.has_send_close_prepared()


if hasattr(select, "poll"):

    def _wait(fd: int, *, writing: bool) -> bool:
        """Block (without the GIL) until `fd` is readable, or writable too if `writing`;
        True if it is readable. poll, not select: select fails on descriptors >= 1024."""
        poller = select.poll()
        poller.register(fd, select.POLLIN | (select.POLLOUT if writing else 0))
        return any(mask & ~select.POLLOUT for _, mask in poller.poll())

else:  # Windows: select takes sockets of any number

    def _wait(fd: int, *, writing: bool) -> bool:
        readable, _, _ = select.select([fd], [fd] if writing else [], [])
        return bool(readable)


class Connection(psycopg.Connection[TupleRow]):
    """A psycopg connection that runs alkstore's transactions (see the module doc)."""

    def __init__(self, pgconn: pq.abc.PGconn, row_factory: RowFactory[TupleRow] = tuple_row):
        super().__init__(pgconn, row_factory)
        self.cursor_factory = Cursor
        self.server_cursor_factory = ServerCursor
        self.in_store_transaction = False
        self._alk_in_flight = False  # sent in pipeline mode, replies unread
        self._alk_unsure = False  # an exchange was interrupted: the pool drops us
        self._alk_prepared: set[bytes] = set()  # our statements that exist in the session
        self._alk_watched = False  # our cursor runs a statement: statement_ran sees its tag
        self.unnamed = False  # behind a pooler: no prepared statements (docs/adr/0020)
        self.fenced_ack = False  # a fenced ack rides with COMMIT (ADR 0022)
        self.failed_state = ""  # the SQLSTATE of the last pipeline's first error

    @property
    def _alk_role(self) -> str:
        return self.pgconn.user.decode()

    @property
    def reusable(self) -> bool:
        return not (self._alk_in_flight or self._alk_unsure or self.closed or self.broken)

    @property
    def can_run_in(self) -> bool:
        """Can `run_prepared_in` run now? In alkstore's transaction, idle or with events in
        flight; not in the application's pipeline, nor while it reads a result (stream)."""
        if not PIPELINED or not self.in_store_transaction:
            return False
        return self._alk_in_flight or (
            not self.pgconn.pipeline_status
            and self.pgconn.transaction_status == pq.TransactionStatus.INTRANS
        )

    @property
    def can_pipeline(self) -> bool:
        """Can `append` send now? Not on an old libpq or in the application's pipeline."""
        return PIPELINED and (self._alk_in_flight or not self.pgconn.pipeline_status)

    # -- alkstore's transaction ------------------------------------------------------

    def begin(self) -> None:
        self._alk_exchange(b"BEGIN")
        self.in_store_transaction = True

    def commit_store(self) -> None:
        """COMMIT, with the replies of the INSERTs in flight."""
        self.in_store_transaction = False
        if not self._alk_in_flight:
            if self._alk_exchange(b"COMMIT") == b"ROLLBACK":
                # PostgreSQL answers COMMIT of a failed transaction with ROLLBACK and
                # no error; psycopg passes that on silently. Nothing was committed.
                raise _errors.StorageError(
                    "the transaction was rolled back, not committed: a statement in it "
                    "failed (an error caught without a savepoint aborts the transaction)"
                )
            return
        self.pgconn.send_query_params(b"COMMIT", None)
        error = self._alk_sync()
        if error is not None:  # an INSERT failed, so COMMIT did not run: roll back
            self._alk_prepared.clear()
            self._alk_rollback()
            raise error

    def rollback_store(self) -> None:
        """Roll back (best effort: a connection left unsure is dropped by the pool)."""
        self.in_store_transaction = False
        self._alk_prepared.clear()  # psycopg's rollback deallocates its statements
        if self._alk_in_flight and not self._alk_unsure:
            try:
                self._alk_sync()  # its error is moot: everything rolls back
            except psycopg.Error:
                self._alk_unsure = True
        self._alk_rollback()

    def _alk_rollback(self) -> None:
        if self._alk_unsure:
            return  # mid-exchange (interrupted): the pool closes it, the server rolls back
        try:
            psycopg.Connection.rollback(self)
        except psycopg.Error:
            self._alk_unsure = True

    def _alk_pipeline(self, name: bytes, query: bytes) -> Any:
        """Enter pipeline mode (once per transaction) and queue the preparation of `name`
        unless this connection has it (or sends unnamed statements); returns the libpq
        connection."""
        pgconn = self.pgconn
        if not self._alk_in_flight:
            pgconn.enter_pipeline_mode()
            self._alk_in_flight = True
        if not self.unnamed and name not in self._alk_prepared:
            pgconn.send_close_prepared(name)  # not an error when it does not exist
            pgconn.send_prepare(name, query)
            self._alk_prepared.add(name)
        return pgconn

    def append(self, name: bytes, query: bytes, rows: Sequence[Sequence[str | None]]) -> None:
        """Queue the INSERTs of `rows`; they go out, in order, with whatever comes next.

        libpq sends its buffer on its own once it grows large; otherwise the next
        settle or COMMIT flushes it, so a lone append costs no extra write. Unnamed
        (behind a pooler, where a statement prepared in one transaction may be missing
        in the next): each INSERT is parsed with its Bind, still pipelined."""
        pgconn = self._alk_pipeline(name, query)
        if self.unnamed:
            for row in rows:
                pgconn.send_query_params(query, [None if v is None else v.encode() for v in row])
            return
        for row in rows:
            pgconn.send_query_prepared(name, [None if v is None else v.encode() for v in row])

    def run_prepared(
        self, name: bytes, query: bytes, values: Sequence[bytes | None]
    ) -> pq.abc.PGresult:
        """One statement on an idle connection through libpq, outside psycopg's cursors:
        prepared once per session, then one Bind/Execute (docs/adr/0010).

        A statement found missing (deallocated by something we did not see) is
        prepared again and run once more: it had not run."""
        pgconn = self.pgconn
        self._alk_unsure = True
        if self.unnamed:  # behind a pooler: parsed with its Bind, nothing left behind
            result = pgconn.exec_params(query, values)
            self._alk_unsure = False
            if result.status not in _ROWS_OR_OK:
                raise _sqlstate.result_error(result, self._alk_role)
            return result
        for _ in range(2):
            if name not in self._alk_prepared:
                pgconn.close_prepared(name)  # not an error when it does not exist
                result = pgconn.prepare(name, query)
                if result.status != _OK:
                    break
                self._alk_prepared.add(name)
            # None is SQL NULL, as in send_query_prepared (psycopg's abc omits it here)
            result = pgconn.exec_prepared(name, values)  # type: ignore[arg-type]
            if result.error_field(_SQLSTATE) != _NO_SUCH_STATEMENT:
                break
            self._alk_prepared.discard(name)
        self._alk_unsure = False
        if result.status not in _ROWS_OR_OK:
            raise _sqlstate.result_error(result, self._alk_role)
        return result

    def run_prepared_in(
        self, name: bytes, query: bytes, values: Sequence[bytes | None]
    ) -> pq.abc.PGresult:
        """One statement inside alkstore's transaction, through libpq, its reply awaited:
        it joins the pipeline of the events in flight, so their replies come back in
        its round trip (tx.enqueue: docs/adr/0010, addendum 2026-12-01).

        No second try on SQLSTATE 26000 here: the error has aborted the transaction.
        It is raised like any error of the statement, and the statement is prepared
        again in the next transaction."""
        pgconn = self._alk_pipeline(name, query)
        # None is SQL NULL (psycopg's abc omits it here)
        if self.unnamed:
            pgconn.send_query_params(query, values)
        else:
            pgconn.send_query_prepared(name, values)
        error, result = self._alk_drain()
        if error is not None:
            self._alk_prepared.clear()
            raise error
        assert result is not None
        return result

    def settle(self) -> None:
        """Read the replies still in flight (one round trip); raise their first error."""
        if self._alk_in_flight:
            error = self._alk_sync()
            if error is not None:
                self._alk_prepared.clear()
                raise error

    def statement_ran(self, statusmessage: str | None) -> None:
        """After the application's statement: did psycopg deallocate everything?"""
        if statusmessage and _DROPS_STATEMENTS(statusmessage):
            self._alk_prepared.clear()

    # -- libpq exchanges -------------------------------------------------------------

    def _alk_flush(self) -> None:
        pgconn = self.pgconn
        while pgconn.flush():
            if _wait(pgconn.socket, writing=True):
                pgconn.consume_input()  # let the server go on writing its replies

    def _alk_next_result(self) -> pq.abc.PGresult | None:
        pgconn = self.pgconn
        while pgconn.is_busy():
            _wait(pgconn.socket, writing=False)
            pgconn.consume_input()
        return pgconn.get_result()

    def _alk_exchange(self, command: bytes) -> bytes | None:
        """One simple-protocol command, outside pipeline mode; its command tag."""
        self._alk_unsure = True
        self.pgconn.send_query(command)
        self._alk_flush()
        error = tag = None
        while (result := self._alk_next_result()) is not None:
            tag = result.command_status
            if result.status != _OK and error is None:
                error = _sqlstate.result_error(result, self._alk_role)
        self._alk_unsure = False
        if error is not None:
            raise error
        return tag

    def _alk_sync(self) -> _errors.AlkstoreError | None:
        """Sync the pipeline, read every reply, leave pipeline mode; the first error."""
        return self._alk_drain()[0]

    def _alk_drain(self) -> tuple[_errors.AlkstoreError | None, pq.abc.PGresult | None]:
        """`_alk_sync`, and the last statement's result."""
        self._alk_unsure = True
        pgconn = self.pgconn
        pgconn.pipeline_sync()
        self._alk_flush()
        error = last = None
        while True:
            result = self._alk_next_result()
            if result is None:
                continue  # the end of one query's results
            if result.status == _SYNC:
                break
            last = result
            if result.status == pq.ExecStatus.FATAL_ERROR and error is None:
                error = _sqlstate.result_error(result, self._alk_role)
                self.failed_state = (result.error_field(_SQLSTATE) or b"").decode()
        pgconn.exit_pipeline_mode()
        self._alk_in_flight = False
        self._alk_unsure = False
        return error, last

    # -- the application's use of the connection ------------------------------------

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        """Every psycopg operation on the connection runs here (`interval`: psycopg's
        default): the replies in flight are read first, whatever cursor runs it. In a store
        transaction, a statement whose tag alkstore does not see (a cursor made by hand,
        psycopg's savepoints) may have dropped the prepared INSERT: it is prepared again."""
        if self._alk_in_flight:
            self.settle()
        if self._alk_watched or not self.in_store_transaction:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, timeout)
        finally:
            self._alk_prepared.clear()

    @property
    def adapters(self) -> AdaptersMap:
        """psycopg's adapters. Every cursor reads them when it is made, so the replies in
        flight are read here too: a server cursor made by hand refuses to run in pipeline
        mode before it reaches `wait()`."""
        if self._alk_in_flight:
            self.settle()
        return super().adapters

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        self.settle()
        with super().transaction(savepoint_name, force_rollback) as tx:
            try:
                yield tx
            except BaseException:
                if self._alk_in_flight:
                    try:
                        self._alk_sync()  # its error, if any, goes with the savepoint
                    except psycopg.Error:
                        self._alk_unsure = True  # broken: the pool drops it
                self._alk_prepared.clear()  # psycopg deallocates its statements on rollback
                raise
            self.settle()  # before RELEASE: an error of an event INSERT rolls it back
        if force_rollback:
            self._alk_prepared.clear()

    @contextmanager
    def pipeline(self) -> Iterator[psycopg.Pipeline]:
        self.settle()
        try:
            with super().pipeline() as pipeline:
                yield pipeline
        finally:
            # Statement tags arrive after the statements there: assume the worst.
            self._alk_prepared.clear()

    def commit(self) -> None:
        if self.in_store_transaction:
            raise psycopg.ProgrammingError(
                "commit() is not allowed inside store.transaction(); it commits on exit"
            )
        super().commit()

    def rollback(self) -> None:
        if self.in_store_transaction:
            raise psycopg.ProgrammingError(
                "rollback() is not allowed inside store.transaction(); raise to roll back"
            )
        super().rollback()
        self._alk_prepared.clear()


def _watch(cursor: psycopg.Cursor[Any]) -> Connection | None:
    """The cursor's connection, told that alkstore sees the tag of what runs next."""
    conn = cursor.connection
    if isinstance(conn, Connection):
        conn._alk_watched = True
        return conn
    return None


def _ran(conn: Connection | None, cursor: psycopg.Cursor[Any]) -> None:
    if conn is not None:
        conn._alk_watched = False
        conn.statement_ran(cursor.statusmessage)


class Cursor(psycopg.Cursor[Row]):
    """The connection's cursors: alkstore reads the tag of each statement they run (did
    psycopg drop its prepared statements?). Events in flight are settled by `wait()`."""

    @overload
    def execute(
        self,
        query: QueryNoTemplate,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Self: ...
    @overload
    def execute(
        self, query: Query, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Self: ...
    def execute(
        self,
        query: Query,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Self:
        conn = _watch(self)
        run: Callable[..., Self] = super().execute  # one call for both overloads
        try:
            return run(query, params, prepare=prepare, binary=binary)
        finally:
            _ran(conn, self)

    def executemany(
        self, query: Query, params_seq: Iterable[Params], *, returning: bool = False
    ) -> None:
        conn = _watch(self)
        try:
            super().executemany(query, params_seq, returning=returning)
        finally:
            _ran(conn, self)

    def stream(
        self,
        query: Query,
        params: Params | None = None,
        *,
        binary: bool | None = None,
        size: int = 1,
    ) -> Iterator[Row]:
        if isinstance(conn := self.connection, Connection):
            conn.settle()  # psycopg refuses a stream in pipeline mode before it reaches wait()
        yield from super().stream(query, params, binary=binary, size=size)


class ServerCursor(psycopg.ServerCursor[Row]):
    """Named cursors settle events in flight before psycopg checks for pipeline mode (a
    cursor made before an append, used after it)."""

    def execute(
        self,
        query: Query,
        params: Params | None = None,
        *,
        binary: bool | None = None,
        **kwargs: Any,
    ) -> Self:
        if isinstance(conn := self.connection, Connection):
            conn.settle()
        return super().execute(query, params, binary=binary, **kwargs)
