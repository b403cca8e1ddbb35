"""The async store API on both engines (docs/adr/0025): `async with store.transaction()`
commits and rolls back as the sync one does, errors pass through typed, many tasks share
the store, and the event loop keeps running while alkstore works.

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


def test_concurrent_claimers_get_each_job_once(backend: Backend) -> None:
    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("work")
        enqueued = [i for i in await q.enqueue_many({"n": n} for n in range(300)) if i]
        seen: list[int] = []

        async def consumer() -> None:
            while jobs := await q.claim_many(7, visibility=60):
                seen.extend(job.id for job in jobs)
                assert await q.ack_many(jobs) == []

        await asyncio.gather(*(consumer() for _ in range(10)))
        assert sorted(seen) == sorted(enqueued)  # each exactly once
        stats = await q.stats()
        assert (stats.ready, stats.active, stats.dead) == (0, 0, 0)

    arun(backend, body, threads=4)


def test_the_job_handle_is_awaited(backend: Backend) -> None:
    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("work")
        await q.configure(max_attempts=2)
        await q.enqueue({"n": 1})
        job = await q.claim(visibility=30)
        assert job is not None and job.attempt == 1 and job.queue == "work"
        await job.heartbeat(progress={"done": 0.5}, extend=60)
        await job.retry(delay=0, error="try again")
        job = await q.claim()
        assert job is not None and job.attempt == 2 and job.max_attempts == 2
        assert (job.raw_payload, job.headers, job.lease_lost) == ({"n": 1}, {}, False)
        await job.release()
        job = await q.claim()
        assert job is not None and job.attempt == 2  # a release does not count
        await job.fail("gave up")
        with pytest.raises(alkstore.LeaseLost):
            await job.ack()
        assert job.lease_lost
        dead = await store.run(q.sync.dead_letters)
        assert [d.last_error for d in dead] == ["gave up"]
        assert await q.claim() is None and await q.next_due() is None
        assert (await q.config()).max_attempts == 2

    arun(backend, body)


def test_a_listener_wakes_on_commit(backend: Backend) -> None:
    async def body(store: alkstore.AsyncStore) -> None:
        listener = store.listen()
        waiting = asyncio.create_task(listener.wait(10))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await store.queue("work").enqueue({"n": 1})
        assert await waiting is True
        assert time.monotonic() - started < 5

    arun(backend, body)


async def ticking(work: Awaitable[None]) -> tuple[float, float, int]:
    """Run `work` beside a ticker that sleeps 1 ms at a time: (the ticker's longest gap,
    the elapsed time, ticks)."""
    done = False
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    gaps.clear()
    started = time.perf_counter()
    await work
    elapsed = time.perf_counter() - started
    done = True
    await tick
    return max(gaps, default=elapsed), elapsed, len(gaps)


def test_the_event_loop_is_never_blocked(backend: Backend) -> None:
    """1,000 enqueues from 10 tasks while a ticker runs: its longest gap is a small part of
    the whole. The control (the sync API called on the loop) shows what blocking looks
    like to the same measure: one gap as long as the work."""

    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("work")

        async def producer(k: int) -> None:
            for n in range(100):
                await q.enqueue({"k": k, "n": n})

        async def all_producers() -> None:
            await asyncio.gather(*(producer(k) for k in range(10)))

        gap, elapsed, ticks = await ticking(all_producers())
        assert (await q.stats()).ready == 1000

        async def blocking() -> None:  # fewer on PostgreSQL: each is a commit
            for n in range(1000 if backend.name == "sqlite" else 300):
                q.sync.enqueue({"n": n})

        control_gap, control_elapsed, _ = await ticking(blocking())
        assert control_gap >= 0.9 * control_elapsed  # the measure sees a blocked loop
        print(f"ticker: longest gap {gap * 1000:.1f} ms of {elapsed * 1000:.0f} ms, {ticks} ticks")
        # a quarter of the work, and at least 25 ms (a busy CI machine's scheduling) ...
        bound = max(elapsed / 4, 0.025)
        assert ticks >= 10 and gap < bound, (gap, elapsed, ticks)
        assert control_gap > bound  # ... which the blocking control fails

    arun(backend, body)


def test_the_callers_trace_context_reaches_the_job(backend: Backend) -> None:
    """The calls run on threads in a copy of the task's context: the span current in the
    task goes into the headers (ADR 0019), for one-shot calls and transaction steps."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    span = NonRecordingSpan(
        SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=False, trace_flags=TraceFlags(1))
    )
    parent = f"00-{0xABC:032x}-{0xDEF:016x}-01"

    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("traced")
        with trace.use_span(span):
            await q.enqueue({"n": 1})
            async with store.transaction() as tx:
                await tx.enqueue("traced", {"n": 2})
                await tx.append(Placed(order_id=1))
        await q.enqueue({"n": 3})  # no span current
        jobs = await q.claim_many(3)
        assert [job.headers for job in jobs] == [{"traceparent": parent}] * 2 + [{}]
        entries = await store.run(store.sync.log.read, 0, 10)
        assert entries[0].headers == {"traceparent": parent}

    arun(backend, body)


def test_a_closed_async_store_refuses_calls(backend: Backend) -> None:
    async def main() -> None:
        store = await alkstore.open_async(backend.url, namespace=backend.namespace)
        await store.migrate()
        await store.aclose()
        await store.aclose()  # twice is fine
        with pytest.raises(alkstore.AlkstoreError, match="closed"):
            await store.queue("q").enqueue({})
        with pytest.raises(alkstore.AlkstoreError, match="closed"):
            async with store.transaction():
                pass
        with pytest.raises(alkstore.InvalidArgument):
            await alkstore.open_async(backend.url, threads=0)

    asyncio.run(main())
