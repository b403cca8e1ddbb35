"""Running the (blocking) store off an event loop: docs/adr/0025.

The async surface (`alkstore._astore`) has no logic of its own: every call runs the
synchronous store's method, unchanged, on a thread, and the calling task awaits it.
Two kinds of thread:

- `Offload`: a small pool for one-shot calls (`await queue.enqueue(...)`, claims,
  acks). Any of its threads may run any call, in any order.
- `Lane`: one thread held by one transaction from `__aenter__` to `__aexit__`. A
  store transaction belongs to the thread that opened it (the SQLite connection is
  the thread's, PostgreSQL's TransactionOpen flag is thread-local: ADR 0016), so
  every step of it (BEGIN, each `tx.append`, the business writes, COMMIT) runs on
  that thread, in the order the task asked for them. `Lanes` lends them out, at
  most `size` at a time, and keeps the idle ones for the next transaction.

Each call runs in a copy of the caller's `contextvars` context, as `asyncio.to_thread`
does: the current OpenTelemetry span reaches the job's headers (ADR 0019).
A call whose awaiting task is cancelled still runs to its end on its thread (a
thread cannot be interrupted): the enqueue may have happened, a claim's jobs come
back when their lease runs out. Inside a transaction the rollback follows it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from alkstore import _errors

P = ParamSpec("P")
T = TypeVar("T")

_STOP = None  # a lane's inbox item that ends its thread


class Offload:
    """`threads` worker threads for one-shot calls of one store."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="alkstore-async")

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on a worker thread, in a copy of the caller's context."""
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        run = functools.partial(ctx.run, fn, *args, **kwargs)
        return await loop.run_in_executor(self._pool, run)

    def close(self, *, wait: bool) -> None:
        """Accept no new call; `wait`: until every call already made has run."""
        self._pool.shutdown(wait=wait)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class Lane:
    """One thread that runs what it is given, in order (one transaction's steps)."""

    def __init__(self) -> None:
        self._inbox: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], contextvars.Context, Any] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="alkstore-lane", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._inbox.get()) is not _STOP:
            loop, future, ctx, fn = item
            try:
                ok, value = True, ctx.run(fn)
            except BaseException as exc:  # handed to the awaiting task, not lost here
                ok, value = False, exc
            try:
                loop.call_soon_threadsafe(_settle, future, ok, value)
            except RuntimeError:  # the loop was closed meanwhile: nobody awaits it
                pass
            del item, future, value, fn  # nothing of a finished step lives on in the thread

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on this lane's thread, after the steps sent before it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        step = functools.partial(fn, *args, **kwargs)
        self._inbox.put((loop, future, contextvars.copy_context(), step))
        return await future

    def stop(self) -> None:
        """End the thread once the steps already sent have run."""
        self._inbox.put(_STOP)


class Lanes:
    """At most `size` lanes lent at a time; the idle ones are kept (LIFO) for reuse."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._idle: list[Lane] = []
        self._free: asyncio.Semaphore | None = None  # made on first use, on the loop
        self._closed = False

    async def acquire(self) -> Lane:
        if self._free is None:
            self._free = asyncio.Semaphore(self._size)
        await self._free.acquire()
        if self._closed:
            self._free.release()
            raise _errors.AlkstoreError("the store is closed")
        return self._idle.pop() if self._idle else Lane()

    def release(self, lane: Lane) -> None:
        """Give a lane back: its next user's steps queue behind whatever it still runs."""
        if self._closed:
            lane.stop()
        else:
            self._idle.append(lane)
        assert self._free is not None
        self._free.release()

    def close(self) -> None:
        """Stop the idle lanes; lanes still lent stop when they come back."""
        self._closed = True
        idle, self._idle = self._idle, []
        for lane in idle:
            lane.stop()
