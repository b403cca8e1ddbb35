"""The async store API: `await alkstore.open_async(url)` (docs/adr/0025).

A thin adapter over the synchronous store, never a second implementation: each
method hands the sync method of the same name to `_offload` (a thread) and awaits
it, so validation, errors, encoding, SQL and the engines' tuned paths are the sync
API's, on both engines. Transactions (one lane each, the rule of ADR 0016 per task
instead of per thread) are in `_atx`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Generic, Literal, ParamSpec, TypeVar, overload

from alkstore import (
    _atx,
    _encoding,
    _engine,
    _errors,
    _jobs,
    _offload,
    _queue,
    _queue_config,
    _store,
    _wake,
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

DEFAULT_THREADS = 10  # alkstore.connect's default pool_size


class AsyncJob(Generic[T]):
    """A claimed job (`alkstore.Job`) whose ack, retry, fail, release and heartbeat are
    awaited. `job` is the sync handle: read anything from it, call nothing on it."""

    __slots__ = ("_store", "job")

    def __init__(self, store: AsyncStore, job: _jobs.Job[T]) -> None:
        self._store = store
        self.job = job

    @property
    def id(self) -> int:
        return int(self.job.id)

    @property
    def queue(self) -> str:
        return str(self.job.queue)

    @property
    def payload(self) -> T:
        return self.job.payload

    @property
    def raw_payload(self) -> Any:
        return self.job.raw_payload

    @property
    def attempt(self) -> int:
        return int(self.job.attempt)

    @property
    def max_attempts(self) -> int:
        return int(self.job.max_attempts)

    @property
    def headers(self) -> dict[str, str]:
        return self.job.headers

    @property
    def lease_lost(self) -> bool:
        return self.job.lease_lost

    @property
    def key(self) -> str | None:
        key: str | None = self.job.key
        return key

    @property
    def type(self) -> str | None:
        kind: str | None = self.job.type
        return kind

    @property
    def priority(self) -> int:
        return int(self.job.priority)

    @property
    def enqueued_at(self) -> datetime:
        return self.job.enqueued_at

    @property
    def progress(self) -> Any:
        return self.job.progress

    async def ack(self) -> None:
        """The job is done: delete it."""
        await self._store.run(self.job.ack)

    async def retry(self, delay: float | None = None, error: str | None = None) -> None:
        """As `Job.retry`: again after `delay` (None: the backoff), or dead-lettered."""
        await self._store.run(self.job.retry, delay, error)

    async def fail(self, reason: str) -> None:
        """Give up now: move the job to the dead letters with `reason`."""
        await self._store.run(self.job.fail, reason)

    async def release(self, delay: float = 0) -> None:
        """Give the job back unprocessed; this attempt does not count."""
        await self._store.run(self.job.release, delay)

    async def heartbeat(self, progress: Any = None, extend: float | None = None) -> None:
        """Renew the lease and store optional progress."""
        await self._store.run(self.job.heartbeat, progress, extend)

    async def snooze(self, delay: float) -> None:
        """As `Job.snooze`: back to waiting for `delay` seconds, the attempt not counted."""
        await self._store.run(self.job.snooze, delay)

    async def check(self) -> None:
        """As `Job.check`: LeaseLost unless this claim still holds the job (ADR 0022)."""
        await self._store.run(self.job.check)

    def __repr__(self) -> str:
        return f"<AsyncJob {self.job.queue}#{self.job.id}>"


class AsyncQueue:
    """`store.queue(name)` of an async store: the producing and consuming half awaited.
    Anything else of `alkstore.Queue`: `await store.run(queue.sync.dead_letters)`."""

    __slots__ = ("_store", "sync")

    def __init__(self, store: AsyncStore, queue: _queue.Queue) -> None:
        self._store = store
        self.sync = queue
        """The synchronous `alkstore.Queue` (call it through `store.run`, not directly)."""

    @property
    def name(self) -> str:
        return self.sync.name

    @overload
    async def enqueue(
        self, payload: object, *, on_duplicate: Literal["raise"] = ..., **options: Any
    ) -> int: ...
    @overload
    async def enqueue(
        self, payload: object, *, on_duplicate: Literal["ignore"], **options: Any
    ) -> int | None: ...
    @overload
    async def enqueue(
        self, payload: object, *, on_duplicate: Literal["replace"], **options: Any
    ) -> int: ...
    async def enqueue(
        self, payload: object, *, on_duplicate: _encoding.OnDuplicate = "raise", **options: Any
    ) -> int | None:
        """`Queue.enqueue`: one job in its own transaction; its id."""
        enqueue: Callable[..., int | None] = self.sync.enqueue  # one call for both overloads
        return await self._store.run(enqueue, payload, on_duplicate=on_duplicate, **options)

    async def enqueue_many(
        self,
        items: Iterable[object],
        *,
        on_duplicate: _encoding.OnDuplicate = "raise",
        **options: Any,
    ) -> list[int | None]:
        """`Queue.enqueue_many`: several jobs in one transaction; their ids."""
        items = list(items)  # an iterator is read here, not on a thread
        return await self._store.run(
            self.sync.enqueue_many, items, on_duplicate=on_duplicate, **options
        )

    async def claim(self, visibility: float | None = None) -> AsyncJob[Any] | None:
        """`Queue.claim`: the next visible job, or None."""
        job = await self._store.run(self.sync.claim, visibility)
        return None if job is None else AsyncJob(self._store, job)

    async def claim_many(self, n: int, visibility: float | None = None) -> list[AsyncJob[Any]]:
        """`Queue.claim_many`: up to n jobs, highest priority first."""
        jobs = await self._store.run(self.sync.claim_many, n, visibility)
        store = self._store
        return [AsyncJob(store, job) for job in jobs]

    async def ack_many(self, jobs: Sequence[AsyncJob[Any]]) -> list[int]:
        """`Queue.ack_many`: one statement; the ids whose lease was lost."""
        return await self._store.run(self.sync.ack_many, [job.job for job in jobs])

    async def next_due(self) -> float | None:
        return await self._store.run(self.sync.next_due)

    async def stats(self) -> _jobs.QueueStats:
        return await self._store.run(self.sync.stats)

    async def config(self, *, refresh: bool = False) -> _queue_config.QueueConfig:
        return await self._store.run(self.sync.config, refresh=refresh)

    async def configure(self, **options: Any) -> _queue_config.QueueConfig:
        """`Queue.configure(max_attempts=, backoff=, visibility=, dead_retention=)`."""
        return await self._store.run(self.sync.configure, **options)

    def __repr__(self) -> str:
        return f"<alkstore.AsyncQueue {self.sync.name!r}>"


class AsyncListener:
    """`store.listen()` awaited: `await listener.wait(timeout)` returns when something new
    may be committed (True) or after `timeout` seconds (False)."""

    def __init__(self, listener: _wake.Listener) -> None:
        self.sync = listener
        # A thread of its own: a wait holds its thread for up to `timeout`, which must
        # not take one of the store's threads or the loop's default executor (6 threads
        # on 2 cores: a few idle consumers would stall every asyncio.to_thread).
        self._lane = _offload.Lane()
        weakref.finalize(self, self._lane.stop)

    async def wait(self, timeout: float) -> bool:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise _errors.InvalidArgument(f"timeout must be > 0 seconds, got {timeout!r}")
        return await self._lane.call(self.sync.wait, timeout)


class AsyncStore:
    """alkstore for asyncio applications; `await alkstore.open_async(url)`, or
    `AsyncStore(store)` around a sync store you hold (it then stays yours to close).

    `threads`: calls of the store that run at once (default: `pool_size`, the
    PostgreSQL connections), and separately at most as many open transactions. Use it
    on one event loop."""

    def __init__(
        self, store: _store.Store, *, threads: int = DEFAULT_THREADS, close_store: bool = False
    ) -> None:
        threads = _threads(threads)
        self.sync = store
        """The synchronous `alkstore.Store` underneath (call it through `run`)."""
        self._offload = _offload.Offload(threads)
        self._lanes = _offload.Lanes(threads)
        self._close_store = close_store
        self._closed = False
        # a store dropped without aclose() still ends its threads (not its connections)
        self._finalizer = weakref.finalize(self, _stop, self._offload, self._lanes)

    @property
    def namespace(self) -> str:
        return self.sync.namespace

    @property
    def engine(self) -> _engine.Engine:
        """The storage engine (`.name`: "sqlite" or "postgres"), as `Store.engine`."""
        return self.sync.engine

    def _check(self) -> None:
        if self._closed:
            raise _errors.AlkstoreError("the store is closed")
        _atx.check_outside(self)

    async def run(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Any blocking call, `fn(*args, **kwargs)`, on the store's threads: the rest of the
        sync API off the loop (`await store.run(store.sync.status)`). Inside this task's
        transaction it raises TransactionOpen, as the sync store does (ADR 0016)."""
        self._check()
        _atx.check_blocking(fn)
        return await self._offload.call(fn, *args, **kwargs)

    def queue(self, name: str) -> AsyncQueue:
        """The durable queue `name` (no database access)."""
        return AsyncQueue(self, self.sync.queue(name))

    def transaction(self) -> _atx.Scope:
        """`async with store.transaction() as tx:` commit on normal exit, roll back on an
        exception (cancellation included)."""
        return _atx.Scope(self, self.sync, self._lanes)

    async def migrate(self) -> list[int]:
        return await self.run(self.sync.migrate)

    async def check(self) -> None:
        await self.run(self.sync.check)

    def listen(self) -> AsyncListener:
        return AsyncListener(self.sync.listen())

    async def aclose(self) -> None:
        """Wait for the calls in flight, stop the threads, close the store if it is ours."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        self._lanes.close()
        await asyncio.to_thread(self._offload.close, wait=True)
        if self._close_store:
            await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<alkstore.AsyncStore {self.sync!r}>"


async def open_async(
    url: str | None = None, *, threads: int | None = None, **options: Any
) -> AsyncStore:
    """`alkstore.connect(url, **options)` off the event loop, as an AsyncStore that closes
    the store with it (`await store.aclose()` or `async with`). `threads` defaults to
    `pool_size` (10)."""
    threads = _threads(options.get("pool_size", DEFAULT_THREADS) if threads is None else threads)
    store = await asyncio.to_thread(_store.connect, url, **options)
    return AsyncStore(store, threads=threads, close_store=True)


def _stop(offload: _offload.Offload, lanes: _offload.Lanes) -> None:
    lanes.close()
    offload.close(wait=False)


def _threads(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _errors.InvalidArgument(f"threads must be an int >= 1, got {value!r}")
    return value
