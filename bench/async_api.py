"""Async store API benchmark: `alkstore.open_async` against the sync API, in one run.

Run it from the repository root (about 2 minutes; `--quick` takes well under one):

    python bench/async_api.py [--quick] [--engines sqlite,postgres] [--seconds 1]
                              [--reps 3] [--callers 8]

On each engine, for 1 caller and for `--callers` callers (sync: threads; async: tasks on
one event loop), the same operations through both APIs on the same store:

1. enqueue: `q.enqueue(payload)` vs `await aq.enqueue(payload)`;
2. transaction: one event and one job, `with store.transaction() as tx: tx.append(...);
   tx.enqueue(...)` vs the same in `async with astore.transaction() as tx` (awaited steps);
3. claim + ack: `q.claim()` then `job.ack()` vs `await aq.claim()` then `await job.ack()`
   (from a queue filled with SQL beforehand).

Ratio = async / sync throughput (docs/adr/0025: the async API runs the sync one on
threads). On PostgreSQL a fourth row measures what the rejected alternative would cost:
a native async enqueue prototype, the engine's own `enqueue` SQL and parameters run on a
psycopg AsyncConnection per task (no thread hop), against the sync `q.enqueue`. First
of all it prints what a hop to a thread and back costs (an awaited no-op call).

Each repetition alternates sync and async slices (A B B A ...); the table shows medians
of `--reps` and the range of the per-repetition ratios. The script always exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/async_api.py`

import alkstore
from alkstore import _encoding, _queue, _sql
from bench._common import (
    Backend,
    OrderPlaced,
    Runner,
    Tally,
    fill_jobs,
    make_backend,
)

ENGINES = ("sqlite", "postgres")
AsyncOp = Callable[[], Awaitable[None]]


@dataclass
class Row:
    engine: str
    name: str
    callers: int
    sync: list[float]
    other: list[float]
    label: str = "async"

    @property
    def ratios(self) -> list[float]:
        return [o / s for o, s in zip(self.other, self.sync, strict=True)]


async def run_tasks(make_op: Callable[[int], AsyncOp], tasks: int, seconds: float) -> Tally:
    """`tasks` tasks, each running its op flat out for `seconds`; count the ops."""
    ops = [make_op(i) for i in range(tasks)]
    end = time.perf_counter() + seconds

    async def work(op: AsyncOp) -> int:
        done = 0
        while time.perf_counter() < end:
            await op()
            done += 1
        return done

    start = time.perf_counter()
    counts = await asyncio.gather(*(work(op) for op in ops))
    return Tally(sum(counts), time.perf_counter() - start)


class Bench:
    def __init__(
        self, backend: Backend, store: alkstore.Store, astore: alkstore.AsyncStore, args: Any
    ) -> None:
        self.backend = backend
        self.store = store
        self.astore = astore
        self.args = args
        self.loop = asyncio.new_event_loop()
        self.runner = Runner(args.callers)
        self.rows: list[Row] = []

    def compare(
        self,
        name: str,
        callers: int,
        sync_op: Callable[[int], Callable[[], None]],
        other_op: Callable[[int], AsyncOp],
        label: str = "async",
    ) -> None:
        seconds, slices = self.args.seconds, 4
        step = seconds / slices
        row = Row(self.backend.name, name, callers, [], [], label)

        def run_sync() -> Tally:
            return self.runner.run(sync_op, callers, step)

        def run_other() -> Tally:
            return self.loop.run_until_complete(run_tasks(other_op, callers, step))

        run_sync()  # warm up both (threads, connections, lanes)
        run_other()
        for _ in range(self.args.reps):
            a, b = Tally(), Tally()
            for i in range(slices):
                first, second = (run_sync, run_other) if i % 2 == 0 else (run_other, run_sync)
                for fn in (first, second):
                    if fn is run_sync:
                        a += fn()
                    else:
                        b += fn()
            row.sync.append(a.rate)
            row.other.append(b.rate)
        self.rows.append(row)
        print(
            f"  [{row.engine}] {name} x{callers}: sync {median(row.sync):,.0f}/s, "
            f"{label} {median(row.other):,.0f}/s, ratio {median(row.ratios):.2f}",
            file=sys.stderr,
            flush=True,
        )

    def run(self) -> list[Row]:
        store, astore = self.store, self.astore
        q, aq = store.queue("bench"), astore.queue("bench")
        event = OrderPlaced(order_id=1, total_cents=100)
        payload = {"order": 1, "email": "someone@example.com"}

        def sync_tx() -> None:
            with store.transaction() as tx:
                tx.append(event)
                tx.enqueue("bench_tx", payload)

        async def async_tx() -> None:
            async with astore.transaction() as tx:
                await tx.append(event)
                await tx.enqueue("bench_tx", payload)

        def sync_claim() -> None:
            job = q.claim()
            assert job is not None, "the queue ran dry: raise the fill"
            job.ack()

        async def async_claim() -> None:
            job = await aq.claim()
            assert job is not None, "the queue ran dry: raise the fill"
            await job.ack()

        async def async_enqueue() -> None:
            await aq.enqueue(payload)

        def sync_enqueue() -> None:
            q.enqueue(payload)

        for callers in sorted({1, self.args.callers}):
            self.compare("enqueue", callers, lambda i: sync_enqueue, lambda i: async_enqueue)
            self.compare("transaction", callers, lambda i: sync_tx, lambda i: async_tx)
            fill_jobs(self.backend, store, "bench", self.fill(callers))
            self.compare("claim + ack", callers, lambda i: sync_claim, lambda i: async_claim)
            if self.backend.name == "postgres":
                self.native(callers, sync_enqueue, payload)
        return self.rows

    def fill(self, callers: int) -> int:
        """Jobs enough for every claim of one comparison (generous)."""
        per_second = 40_000 if self.backend.name == "sqlite" else 8_000 * min(callers, 2)
        return int(per_second * self.args.seconds * (self.args.reps + 1) * 2)

    def native(self, callers: int, sync_enqueue: Callable[[], None], payload: object) -> None:
        """The rejected alternative's floor: the engine's enqueue SQL on AsyncConnections."""
        query = _sql.queries("alkstore.postgres", self.store.namespace)["enqueue"]
        runtime = _queue.Runtime(self.store._engine, None)
        conns = [
            self.loop.run_until_complete(
                psycopg.AsyncConnection.connect(self.backend.url, autocommit=True)
            )
            for _ in range(callers)
        ]

        def make(i: int) -> AsyncOp:
            conn = conns[i]

            async def op() -> None:
                params = _encoding.plain_params(runtime, "bench_native", payload)
                cursor = await conn.execute(query, params, prepare=True)
                await cursor.fetchall()

            return op

        try:
            self.compare("enqueue", callers, lambda i: sync_enqueue, make, "native")
        finally:
            for conn in conns:
                self.loop.run_until_complete(conn.close())

    def close(self) -> None:
        self.runner.close()
        self.loop.run_until_complete(self.astore.aclose())
        self.loop.close()


def hop_costs(calls: int = 3_000, reps: int = 3) -> dict[str, float]:
    """µs per awaited no-op call: on a lane, through the store's call threads, and through
    `asyncio.to_thread` (the loop's default executor) for reference; best of `reps`."""
    from alkstore import _offload

    def noop() -> None:
        return None

    async def measure() -> dict[str, float]:
        offload, lane = _offload.Offload(4), _offload.Lane()
        ways: dict[str, Callable[[], Awaitable[None]]] = {
            "lane": lambda: lane.call(noop),
            "call threads": lambda: offload.call(noop),
            "asyncio.to_thread": lambda: asyncio.to_thread(noop),
        }
        best = dict.fromkeys(ways, float("inf"))
        for _ in range(reps):
            for name, way in ways.items():
                started = time.perf_counter()
                for _ in range(calls):
                    await way()
                best[name] = min(best[name], (time.perf_counter() - started) / calls * 1e6)
        lane.stop()
        offload.close(wait=True)
        return best

    return asyncio.run(measure())


def run_engine(engine: str, args: Any) -> list[Row]:
    backend = make_backend(engine)
    try:
        with backend.connect("bench") as store:
            store.migrate()
            backend.prewarm(store, args.callers)
            astore = alkstore.AsyncStore(store, threads=max(args.callers, 10))
            bench = Bench(backend, store, astore, args)
            try:
                return bench.run()
            finally:
                bench.close()
    finally:
        backend.close()


def render(rows: list[Row]) -> str:
    lines = [
        "| engine | operation | callers | sync ops/s | other ops/s | ratio (range) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        ratios = r.ratios
        lines.append(
            f"| {r.engine} | {r.name} ({r.label}) | {r.callers} | {median(r.sync):,.0f} | "
            f"{median(r.other):,.0f} | {median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 rep of 0.5 s")
    parser.add_argument("--engines", default=",".join(ENGINES), help="sqlite,postgres")
    parser.add_argument("--seconds", type=float, help="per variant and rep (default 1)")
    parser.add_argument("--reps", type=int, help="repetitions (default 3)")
    parser.add_argument("--callers", type=int, default=8, help="the concurrent case")
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (0.5 if args.quick else 1.0)
    args.reps = args.reps or (1 if args.quick else 3)
    engines = [e for e in args.engines.split(",") if e]
    print(
        f"alkstore async API benchmark: engines={','.join(engines)} reps={args.reps} "
        f"seconds={args.seconds} callers=1,{args.callers} cpus={os.cpu_count()} "
        f"load={os.getloadavg()[0]:.2f}",
        flush=True,
    )
    started = time.perf_counter()
    hops = hop_costs()
    print("a hop (awaited no-op call): " + ", ".join(f"{k} {v:.1f} µs" for k, v in hops.items()))
    rows = [row for engine in engines for row in run_engine(engine, args)]
    print(f"\n{render(rows)}\n")
    print(
        f"total {time.perf_counter() - started:.0f} s; load average now "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
