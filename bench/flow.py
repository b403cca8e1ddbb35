"""Flow-control benchmark (docs/adr/0021): ordered, limited and rate-limited drains
against the plain drain of the same jobs, in the same run.

Run it from the repository root (about 3-4 minutes; `--quick` takes about one):

    python bench/flow.py [--quick] [--engines sqlite,postgres] [--reps 3]
                         [--keys 1000] [--per-key 20] [--hot 5000] [--rate 1000]
                         [--only LABEL-PART ...]

Every drain is the Queue API's: `claim_many(100)` then `ack_many` of what it got, in
one process, until the queue is empty; jobs/s = jobs / drain time. The jobs are
enqueued first (`tx.enqueue(..., group=key)`, 1,000 per transaction), interleaved by
key (`--keys` keys x `--per-key` jobs), in a fresh namespace per drain. Measurements
(A / B alternate, medians of `--reps`):

1. ordered / unordered: the queue configured `ordered=True` (one job per key at a
   time, in order) against the same jobs in a plain queue. Target >= 0.6. Also through
   the worker runtime: `relay.Worker(store)` with a no-op handler, `run(once=True)`.
2. hot key: an ordered queue where one key holds `--hot` jobs enqueued before all the
   others: the rate at which the other keys' jobs drain against (1). Target: the hot
   key does not slow the others (about 1.0); the hot key itself goes one job per claim.
3. limits not binding: `concurrency=1_000_000`, then `rate_limit=10_000_000` per
   second, then `key_concurrency=1_000`, each against the plain drain. Target >= 0.75.
4. the unordered drain on PostgreSQL with the ordered queues' promotion trigger (a
   statement trigger, migration 0012: it fires on every delete of jobs) against the same
   drain with that trigger disabled. Target: about 1.0 (unordered acks pay nothing).
5. rate binding: `rate_limit=--rate` per second, a supply of 6 s worth; the starts
   counted from 1 s after the first claim to 5 s after it, per second. Target within
   +-5 % of the limit.

SQLite runs on a file in a temp directory; PostgreSQL on a throwaway database (see
bench/_common.py), dropped at the end.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/flow.py`

import psycopg

import alkstore
import relay
from bench._common import base_parser, git_commit, load_average, make_backend

QUEUE = "flow"
BATCH = 100


def fill(store: alkstore.Store, keys: int, per_key: int, hot: int = 0) -> None:
    pending: list[tuple[int, str]] = [(n, "hot") for n in range(hot)]
    pending += [(seq, f"k{key}") for seq in range(per_key) for key in range(keys)]
    for start in range(0, len(pending), 1_000):
        with store.transaction() as tx:
            for seq, key in pending[start : start + 1_000]:
                tx.enqueue(QUEUE, {"seq": seq}, group=key)


def drain(queue: alkstore.Queue, total: int, skip_key: str | None = None) -> tuple[float, int]:
    """Seconds to drain every job but `skip_key`'s (those are drained too), and rounds."""
    done = rounds = 0
    t0 = time.perf_counter()
    elapsed = 0.0
    while True:
        jobs = queue.claim_many(BATCH)
        if not jobs:
            break
        rounds += 1
        queue.ack_many(jobs)
        done += sum(1 for job in jobs if job.key != skip_key)
        if done == total and not elapsed:
            elapsed = time.perf_counter() - t0
    return (elapsed or time.perf_counter() - t0), rounds


def one_drain(
    url: str,
    options: dict[str, Any],
    keys: int,
    per_key: int,
    hot: int = 0,
    setup: tuple[str, ...] = (),
) -> float:
    """jobs/s of one drain of keys x per_key jobs (the hot key's not counted); `setup`:
    SQL run after the migration ({ns}: the namespace)."""
    store = alkstore.connect(url, namespace=f"b_{uuid.uuid4().hex[:10]}")
    try:
        store.migrate()
        if setup:
            with psycopg.connect(url, autocommit=True) as conn:
                for statement in setup:
                    conn.execute(statement.replace("{ns}", store.namespace))
        queue = store.queue(QUEUE)
        if options:
            queue.configure(**options)
        fill(store, keys, per_key, hot)
        seconds, _ = drain(queue, keys * per_key, "hot" if hot else None)
        return keys * per_key / seconds
    finally:
        drop(store, url)


def one_worker_drain(url: str, options: dict[str, Any], keys: int, per_key: int) -> float:
    """jobs/s of the worker runtime draining keys x per_key jobs (`run(once=True)`, a
    no-op handler, the library's defaults), in this process."""
    store = alkstore.connect(url, namespace=f"b_{uuid.uuid4().hex[:10]}")
    try:
        store.migrate()
        queue = store.queue(QUEUE)
        if options:
            queue.configure(**options)
        fill(store, keys, per_key)
        worker = relay.Worker(store)

        @worker.handler(QUEUE)
        def noop(job: alkstore.Job[Any]) -> None:
            pass

        t0 = time.perf_counter()
        worker.run(once=True)
        seconds = time.perf_counter() - t0
        assert queue.stats().ready == 0, "the drain ended early"
        return keys * per_key / seconds
    finally:
        drop(store, url)


def drop(store: alkstore.Store, url: str) -> None:
    """Close the store; on PostgreSQL drop its namespace (SQLite's file goes at the end)."""
    namespace = store.namespace
    store.close()
    if url.startswith("postgresql"):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {namespace} CASCADE")


ONLY: list[str] = []  # --only: the measurements whose label contains one of these


def ratio(
    label: str, reps: int, a: Callable[[], float], b: Callable[[], float]
) -> tuple[str, float, float, float]:
    if ONLY and not any(part in label for part in ONLY):
        return label, 0.0, 0.0, 0.0
    rates_a, rates_b = [], []
    for _ in range(reps):
        rates_a.append(a())
        rates_b.append(b())
    ra, rb = median(rates_a), median(rates_b)
    ratios = sorted(x / y for x, y in zip(rates_a, rates_b, strict=True))
    print(
        f"  {label}: {ra:,.0f} / {rb:,.0f} jobs/s = {median(ratios):.2f} (each rep: "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + ")",
        flush=True,
    )
    return label, ra, rb, median(ratios)


def rate_binding(url: str, rate: int) -> float:
    store = alkstore.connect(url, namespace=f"b_{uuid.uuid4().hex[:10]}")
    try:
        store.migrate()
        queue = store.queue(QUEUE)
        queue.configure(rate_limit=rate, rate_period=1.0)
        supply = rate * 6 + BATCH
        fill(store, 100, supply // 100 + 1)
        counted = 0
        t0 = time.perf_counter()
        while (now := time.perf_counter() - t0) < 5.0:
            jobs = queue.claim_many(BATCH)
            if jobs:
                queue.ack_many(jobs)
                if now >= 1.0:
                    counted += len(jobs)
            else:
                time.sleep(0.002)
        return counted / 4.0
    finally:
        drop(store, url)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--per-key", type=int, default=20)
    parser.add_argument("--hot", type=int, default=5_000)
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--only", action="append", default=[], help="labels containing this")
    args = parser.parse_args()
    ONLY.extend(args.only)
    reps = args.reps or (1 if args.quick else 3)
    keys, per_key = (200, 10) if args.quick else (args.keys, args.per_key)
    print(f"commit {git_commit()}, load {load_average():.1f}, {keys} keys x {per_key} jobs")
    for engine in args.engines:
        backend = make_backend(engine)
        url = backend.url
        print(f"{engine}:", flush=True)
        try:

            def plain(url: str = url) -> float:
                return one_drain(url, {}, keys, per_key)

            def with_(options: dict[str, Any], hot: int = 0, url: str = url) -> Callable[[], float]:
                return lambda: one_drain(url, options, keys, per_key, hot)

            ratio("ordered / unordered", reps, with_({"ordered": True}), plain)

            def worker(options: dict[str, Any], url: str = url) -> Callable[[], float]:
                return lambda: one_worker_drain(url, options, keys, per_key)

            ratio(
                "worker runtime: ordered / unordered", reps, worker({"ordered": True}), worker({})
            )
            ratio(
                f"others beside a hot key of {args.hot} / ordered without",
                reps,
                with_({"ordered": True}, args.hot),
                with_({"ordered": True}),
            )
            if engine == "postgres":

                def untriggered(url: str = url) -> float:
                    off = ("ALTER TABLE {ns}.jobs DISABLE TRIGGER jobs_promote",)
                    return one_drain(url, {}, keys, per_key, setup=off)

                ratio("unordered drain: promotion trigger on / off", reps, plain, untriggered)
            ratio("concurrency=1e6 / unlimited", reps, with_({"concurrency": 1_000_000}), plain)
            ratio("rate_limit=1e7/s / unlimited", reps, with_({"rate_limit": 10_000_000}), plain)
            ratio(
                "key_concurrency=1000 / unlimited", reps, with_({"key_concurrency": 1_000}), plain
            )
            if ONLY and not any(part in "rate_limit binding" for part in ONLY):
                continue
            measured = [rate_binding(url, args.rate) for _ in range(reps)]
            print(
                f"  rate_limit={args.rate}/s binding: "
                + ", ".join(f"{m:,.0f}/s ({m / args.rate:.3f})" for m in measured),
                flush=True,
            )
        finally:
            backend.close()


if __name__ == "__main__":
    main()
