"""The async store API's queues on both engines (docs/adr/0025): claims and acks from
many tasks, the job handle, the wake, the caller's trace context, a closed store, and
an event loop that keeps running while alkstore works. Transactions:
test_async_store.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

import pytest

import alkstore
from tests.conftest import Backend
from tests.contract.test_async_store import Placed, arun


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
