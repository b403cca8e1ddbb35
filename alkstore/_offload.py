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
from typing import Any, ParamSpec, TypeVar

from alkstore import _errors

P = ParamSpec("P")
T = TypeVar("T")

_STOP = None  # an inbox item that ends one thread serving it

Item = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Any]
Inbox = queue.SimpleQueue[Item | None]


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _serve(inbox: Inbox) -> None:
    """A thread's life: run what arrives, in order, and hand each result to its loop."""
    while (item := inbox.get()) is not _STOP:
        loop, future, ctx, fn = item
        try:
            ok, value = True, ctx.run(fn)
        except BaseException as exc:  # handed to the awaiting task, not lost here
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(_settle, future, ok, value)
        except RuntimeError:  # the loop was closed meanwhile: nobody awaits it
            pass
        del item, future, value, fn  # nothing of a finished call lives on in the thread


async def _send(inbox: Inbox, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
    """Put `fn(*args, **kwargs)` in `inbox` with a copy of the caller's context; await it.
    (One queue put and one `call_soon_threadsafe`: about half the cost of
    `run_in_executor`'s two futures chained, docs/performance.md.)"""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    call = functools.partial(fn, *args, **kwargs)
    inbox.put((loop, future, contextvars.copy_context(), call))
    return await future


def _thread(inbox: Inbox, name: str) -> threading.Thread:
    thread = threading.Thread(target=_serve, args=(inbox,), name=name, daemon=True)
    thread.start()
    return thread


class Offload:
    """`threads` threads serving one queue of one-shot calls of one store."""

    def __init__(self, threads: int) -> None:
        self._inbox: Inbox = queue.SimpleQueue()
        self._threads = [_thread(self._inbox, "alkstore-async") for _ in range(threads)]

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on one of the threads, in a copy of the caller's context."""
        return await _send(self._inbox, fn, args, kwargs)

    def close(self, *, wait: bool) -> None:
        """End the threads once every call already made has run; `wait` for that."""
        for _ in self._threads:
            self._inbox.put(_STOP)
        if wait:
            for thread in self._threads:
                thread.join()


class Lane:
    """One thread that runs what it is given, in order (one transaction's steps)."""

    def __init__(self) -> None:
        self._inbox: Inbox = queue.SimpleQueue()
        self._thread = _thread(self._inbox, "alkstore-lane")

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on this lane's thread, after the steps sent before it."""
        return await _send(self._inbox, fn, args, kwargs)

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
