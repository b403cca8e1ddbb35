"""`async with store.transaction() as tx` of the async store (docs/adr/0025).

The sync `Transaction` does all the work, on one thread lent to the block (its lane):
a store transaction belongs to the thread that opened it (SQLite: the thread's
connection; PostgreSQL: the thread-local flag of ADR 0016). The lane runs the steps in
the order the task sent them.

The transaction begins with its first step, in that step's hop to the lane: entering
the block costs no thread hop, and a block that awaits something else first (an HTTP
call, a lock) holds neither SQLite's write lock nor a PostgreSQL connection meanwhile.
A block that sent no step ends without touching the database. What lives on the lane
thread (`_Held`) is only ever touched there.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, overload

import psycopg

from alkstore import _encoding, _errors, _events, _offload, _store, _transaction

P = ParamSpec("P")
R = TypeVar("R")

# The transaction the current task is inside (ADR 0016, per task). Tasks started inside
# the block inherit it (asyncio copies the context): they too are inside while it is open.
_inside: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "alkstore_async_transaction", default=None
)
_OPEN = (
    "a store transaction is open in this task: inside `async with store.transaction() as tx:` "
    "use tx.append, tx.enqueue and tx.run; other calls of the same store would run in a "
    "transaction of their own (docs/adr/0016, docs/adr/0025)"
)


def check_outside(owner: object) -> None:
    """TransactionOpen if this task is inside a transaction of `owner` (an AsyncStore)."""
    scope = _inside.get()
    if scope is not None and scope.open and scope.owner is owner:
        raise _errors.TransactionOpen(_OPEN)


def check_blocking(fn: object) -> None:
    """`run` takes the blocking function itself: a coroutine function would only be
    called on the thread, never awaited."""
    if inspect.iscoroutinefunction(fn):
        raise TypeError(f"run() takes a blocking function, not a coroutine function: {fn!r}")


class _Held:
    """The lane's side of one transaction: the sync scope and Transaction, once begun."""

    __slots__ = ("scope", "store", "tx")

    def __init__(self, store: _store.Store) -> None:
        self.store = store
        self.scope: AbstractContextManager[_transaction.Transaction] | None = None
        self.tx: _transaction.Transaction | None = None

    def step(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """On the lane: begin if not yet begun (BEGIN goes with the first step), then
        `fn(tx, *args, **kwargs)`."""
        tx = self.tx
        if tx is None:
            scope = self.store.transaction()  # made here: SQLite binds the thread's connection
            tx = scope.__enter__()
            self.scope, self.tx = scope, tx
        return fn(tx, *args, **kwargs)

    def end(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        """On the lane: COMMIT, or ROLLBACK with the exception that ended the block."""
        if self.scope is not None:
            scope, self.scope, self.tx = self.scope, None, None
            scope.__exit__(exc_type, exc, tb)


def _execute(tx: _transaction.Transaction, query: Any, params: Any) -> list[tuple[Any, ...]]:
    """One statement on the transaction's driver connection (apsw or psycopg); its rows."""
    conn = tx.connection
    if isinstance(conn, psycopg.Connection):
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []
    return list(conn.execute(query, params))


def _with_connection(
    tx: _transaction.Transaction, fn: Callable[..., R], *args: Any, **kwargs: Any
) -> R:
    return fn(tx.connection, *args, **kwargs)


class AsyncTransaction:
    """`async with store.transaction() as tx`: the sync `Transaction`'s steps, awaited.
    Business writes: `await tx.execute(sql, params)`, or `await tx.run(fn)` with the raw
    driver connection, on the transaction's thread."""

    __slots__ = ("_held", "_lane")

    def __init__(self, lane: _offload.Lane, held: _Held) -> None:
        self._lane: _offload.Lane | None = lane
        self._held = held

    async def _step(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        lane = self._lane
        if lane is None:
            raise RuntimeError("this transaction has ended")
        return await lane.call(self._held.step, fn, *args, **kwargs)

    async def append(
        self,
        event: _events.Event,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """`Transaction.append`: visible in the log when the transaction commits."""
        await self._step(_transaction.Transaction.append, event, key=key, headers=headers)

    async def append_many(
        self,
        events: Iterable[_events.Event],
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """`Transaction.append_many`: in order, with the same key and headers."""
        events = list(events)  # an iterator is read here, not on the lane
        await self._step(_transaction.Transaction.append_many, events, key=key, headers=headers)

    @overload
    async def enqueue(
        self, queue: str, payload: object, *, on_duplicate: Literal["raise"] = ..., **options: Any
    ) -> int: ...
    @overload
    async def enqueue(
        self, queue: str, payload: object, *, on_duplicate: Literal["ignore"], **options: Any
    ) -> int | None: ...
    async def enqueue(
        self,
        queue: str,
        payload: object,
        *,
        on_duplicate: _encoding.OnDuplicate = "raise",
        **options: Any,
    ) -> int | None:
        """`Transaction.enqueue`: a job that exists only if this transaction commits."""
        enqueue: Callable[..., int | None] = _transaction.Transaction.enqueue  # both overloads
        return await self._step(enqueue, queue, payload, on_duplicate=on_duplicate, **options)

    async def execute(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement of yours in the transaction (the driver's own parameter style:
        apsw `?`/`:name`, psycopg `%s`/`%(name)s`); its rows ([] for none)."""
        return await self._step(_execute, query, params)

    async def run(
        self, fn: Callable[Concatenate[Any, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """`fn(connection, *args, **kwargs)` on the transaction's thread, with the raw driver
        connection (apsw.Connection or psycopg.Connection): blocking code of yours that
        belongs in the transaction (several statements, a sync ORM session on it)."""
        check_blocking(fn)
        return await self._step(_with_connection, fn, *args, **kwargs)


class Scope:
    """What `AsyncStore.transaction()` returns: lend a lane for the block (no hop: the
    first step begins), end the transaction on it, give the lane back."""

    __slots__ = ("_held", "_lane", "_lanes", "_store", "_token", "_tx", "open", "owner")

    def __init__(self, owner: object, store: _store.Store, lanes: _offload.Lanes) -> None:
        self.owner = owner
        self.open = False
        self._store = store
        self._lanes = lanes

    async def __aenter__(self) -> AsyncTransaction:
        check_outside(self.owner)
        self._lane = await self._lanes.acquire()
        self._held = _Held(self._store)
        self._tx = AsyncTransaction(self._lane, self._held)
        self.open = True
        self._token = _inside.set(self)
        return self._tx

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        self.open = False
        _inside.reset(self._token)
        self._tx._lane = None
        lane = self._lane
        try:
            # after the steps already sent (a cancelled task's too), and shielded: a second
            # cancellation does not leave the transaction open on the lane
            await asyncio.shield(lane.call(self._held.end, exc_type, exc, tb))
        finally:
            self._lanes.release(lane)
