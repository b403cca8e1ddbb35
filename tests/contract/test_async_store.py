"""The async store API's transactions on both engines (docs/adr/0025): `async with
store.transaction()` commits and rolls back as the sync one does, errors pass through
typed, cancellation rolls back, ADR 0016 holds per task, many tasks write at once.
Queues, the job handle and the never-blocked loop: test_async_queue.py.

Each test runs its own event loop with `asyncio.run` (no pytest plugin needed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import alkstore
from tests.conftest import Backend

T = TypeVar("T")


class Placed(alkstore.Event, tag="async.placed"):
    order_id: int


class Boom(Exception):
    pass


def arun(
    backend: Backend, body: Callable[[alkstore.AsyncStore], Awaitable[T]], **options: Any
) -> T:
    """`body(store)` on a fresh event loop, with a migrated async store on the backend."""

    async def main() -> T:
        store = await alkstore.open_async(backend.url, namespace=backend.namespace, **options)
        async with store:
            await store.migrate()
            return await body(store)

    return asyncio.run(main())


def orders_table(backend: Backend) -> tuple[str, str]:
    """The application's table (in the namespace's schema on PostgreSQL, dropped with
    it) and the driver's placeholder."""
    if backend.name == "postgres":
        return f"{backend.namespace}.app_orders", "%s"
    return "app_orders", "?"


async def create_orders(store: alkstore.AsyncStore, backend: Backend) -> tuple[str, str]:
    table, ph = orders_table(backend)
    async with store.transaction() as tx:
        await tx.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, note TEXT)")
    return table, ph


async def counts(store: alkstore.AsyncStore, table: str, queue: str) -> tuple[int, int, int]:
    """(rows in the table, events in the log, ready jobs in `queue`)"""
    async with store.transaction() as tx:
        (rows,) = (await tx.execute(f"SELECT count(*) FROM {table}"))[0]
    head = await store.run(store.sync.log.head)
    stats = await store.queue(queue).stats()
    return int(rows), head, stats.ready


def test_commit_publishes_the_row_the_event_and_the_job(backend: Backend) -> None:
    async def body(store: alkstore.AsyncStore) -> None:
        table, ph = await create_orders(store, backend)
        async with store.transaction() as tx:
            await tx.execute(f"INSERT INTO {table} (id, note) VALUES ({ph}, {ph})", (1, "one"))
            await tx.append(Placed(order_id=1), key="order-1")
            await tx.append_many([Placed(order_id=2), Placed(order_id=3)])
            job_id = await tx.enqueue("receipts", {"order": 1}, priority=5)
            # the transaction sees its own write after the appends (PostgreSQL: in flight)
            assert await tx.execute(f"SELECT note FROM {table} WHERE id = {ph}", (1,)) == [("one",)]
            assert await tx.run(lambda conn, n: (conn is not None) and n, 7) == 7
        assert isinstance(job_id, int)
        assert await counts(store, table, "receipts") == (1, 3, 1)
        entries = await store.run(store.sync.log.read, 0, 10)
        assert (entries[0].type, entries[0].key) == ("async.placed", "order-1")
        assert [e.payload for e in entries] == [Placed(order_id=n) for n in (1, 2, 3)]
        job = await store.queue("receipts").claim()
        assert job is not None and job.id == job_id and job.payload == {"order": 1}
        assert (job.priority, job.key, job.type, job.progress) == (5, None, None, None)
        assert job.enqueued_at.tzinfo is not None

    arun(backend, body)


def test_an_exception_rolls_everything_back_and_passes_through(backend: Backend) -> None:
    async def body(store: alkstore.AsyncStore) -> None:
        table, ph = await create_orders(store, backend)
        raised = Boom("declined")
        with pytest.raises(Boom) as caught:
            async with store.transaction() as tx:
                await tx.execute(f"INSERT INTO {table} (id, note) VALUES ({ph}, {ph})", (1, "x"))
                await tx.append(Placed(order_id=1))
                await tx.enqueue("receipts", {"order": 1})
                raise raised
        assert caught.value is raised  # the very exception, not a wrapper
        assert await counts(store, table, "receipts") == (0, 0, 0)
        # the store (and its one transaction lane) is usable afterwards
        async with store.transaction() as tx:
            await tx.append(Placed(order_id=2))
        assert await counts(store, table, "receipts") == (0, 1, 0)

    arun(backend, body, threads=1)


def test_a_failing_step_raises_typed_and_the_transaction_goes_on(backend: Backend) -> None:
    """As in the sync API: a step that raises before touching the database (a bad option,
    a payload that does not encode) or a duplicate dedupe key does not abort the
    transaction; the block decides."""

    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("receipts")
        async with store.transaction() as tx:
            with pytest.raises(alkstore.InvalidArgument):
                await tx.enqueue("receipts", {"order": 1}, priority="high")
            with pytest.raises(alkstore.InvalidPayload):
                await tx.enqueue("receipts", object())
            await tx.enqueue("receipts", {"order": 1}, dedupe_key="o-1")
            with pytest.raises(alkstore.DuplicateJob):
                await tx.enqueue("receipts", {"order": 1}, dedupe_key="o-1")
            assert await tx.enqueue("receipts", {}, dedupe_key="o-1", on_duplicate="ignore") is None
            await tx.append(Placed(order_id=1))
        assert (await q.stats()).ready == 1
        assert await store.run(store.sync.log.head) == 1
        with pytest.raises(alkstore.PayloadTooLarge):
            await q.enqueue("x" * (2 * 1024 * 1024))
        with pytest.raises(alkstore.InvalidName):
            store.queue("no spaces")

        async def not_blocking() -> None:
            pass

        with pytest.raises(TypeError, match="coroutine function"):
            _ = await store.run(not_blocking)  # mypy flags this too

    arun(backend, body)


def test_a_cancelled_task_rolls_back_and_frees_its_lane(backend: Backend) -> None:
    async def body(store: alkstore.AsyncStore) -> None:
        entered = asyncio.Event()

        async def order() -> None:
            async with store.transaction() as tx:
                await tx.append(Placed(order_id=1))
                await tx.enqueue("receipts", {"order": 1})
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(order())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await store.queue("receipts").stats()).ready == 0
        assert await store.run(store.sync.log.head) == 0
        async with store.transaction() as tx:  # threads=1: the lane came back
            await tx.append(Placed(order_id=2))
        assert await store.run(store.sync.log.head) == 1

        async def slow_step() -> None:  # cancelled while a step runs on the lane
            async with store.transaction() as tx:
                await tx.append(Placed(order_id=3))
                entered.set()
                await tx.run(lambda conn: time.sleep(0.3))

        entered.clear()
        task = asyncio.create_task(slow_step())
        await entered.wait()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with store.transaction() as tx:  # after the step ended and rolled back
            await tx.enqueue("receipts", {"order": 4})
        assert await store.run(store.sync.log.head) == 1
        assert (await store.queue("receipts").stats()).ready == 1

    arun(backend, body, threads=1)


def test_the_transaction_begins_with_its_first_step(backend: Backend) -> None:
    """Entering the block takes no lock and no connection: until its first step, another
    task writes freely (SQLite: the write lock is free). A block with no step is a no-op."""

    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("receipts")
        inside, written = asyncio.Event(), asyncio.Event()

        async def writer() -> None:
            await inside.wait()
            await q.enqueue({"from": "elsewhere"})
            written.set()

        task = asyncio.create_task(writer())
        async with store.transaction() as tx:
            inside.set()
            await asyncio.wait_for(written.wait(), 10)  # not stuck behind this block
            await tx.enqueue("receipts", {"from": "inside"})
        await task
        assert (await q.stats()).ready == 2
        async with store.transaction():
            pass
        with pytest.raises(Boom):
            async with store.transaction():
                raise Boom()
        assert (await q.stats()).ready == 2

    arun(backend, body, threads=2)


def test_inside_a_transaction_the_task_uses_tx(backend: Backend) -> None:
    """ADR 0016 per task: the store's other calls raise TransactionOpen inside the block
    (they would commit on their own, or wait for it); other tasks use the store as usual."""

    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("receipts")
        asked = asyncio.Event()

        async def elsewhere() -> alkstore.QueueStats:  # a task started outside the block
            await asked.wait()
            return await q.stats()

        other = asyncio.create_task(elsewhere())
        async with store.transaction() as tx:
            with pytest.raises(alkstore.TransactionOpen, match="async with"):
                await q.enqueue({"order": 1})
            with pytest.raises(alkstore.TransactionOpen):
                await store.run(store.sync.status)
            with pytest.raises(alkstore.TransactionOpen):
                async with store.transaction():
                    pass
            with pytest.raises(alkstore.TransactionOpen):  # a task started inside is inside
                await asyncio.create_task(q.enqueue({"order": 2}))
            await tx.enqueue("receipts", {"order": 1})
            if backend.name == "postgres":  # SQLite's other writers wait for this one
                asked.set()
                assert (await other).ready == 0  # its own transaction, not this one
        asked.set()
        assert (await other).ready == (0 if backend.name == "postgres" else 1)
        with pytest.raises(RuntimeError, match="ended"):
            await tx.append(Placed(order_id=1))
        assert (await q.stats()).ready == 1

    arun(backend, body)


def test_many_tasks_write_at_once(backend: Backend) -> None:
    """200 tasks, each one transaction (an event and a job), over 4 threads and lanes."""

    async def body(store: alkstore.AsyncStore) -> None:
        # the loop's own thread used the sync store first, as a set-up may: a transaction
        # still belongs to its lane's thread (SQLite: that thread's connection)
        store.sync.subscribe("receipts_copy", events=["async.*"])

        async def order(n: int) -> int:
            async with store.transaction() as tx:
                await tx.append(Placed(order_id=n), key=f"order-{n}")
                await asyncio.sleep(0)  # let the others interleave inside their blocks
                return await tx.enqueue("receipts", {"order": n})

        ids = await asyncio.gather(*(order(n) for n in range(200)))
        assert len(set(ids)) == 200
        assert await store.run(store.sync.log.head) == 200
        entries = await store.run(store.sync.log.read, 0, 500)
        assert sorted(e.payload.order_id for e in entries) == list(range(200))  # type: ignore[attr-defined]
        assert (await store.queue("receipts").stats()).ready == 200

    arun(backend, body, threads=4)
