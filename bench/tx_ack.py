"""Transactional ack benchmark (ADR 0022): a handler that writes one row, acked with it in
one transaction (`job.transaction()`) against the same handler with a plain ack.

Run it from the repository root (about a minute; `--quick` takes a few seconds):

    python bench/tx_ack.py [--quick] [--engines sqlite,postgres] [--reps 5]
                           [--jobs 5000] [--concurrency 8] [--json results.json]

On each engine, one `relay.Worker(store, concurrency=C)` in this process drains a queue of
`--jobs` jobs (put there with one SQL statement) with `run(once=True)`, twice per
repetition, the two variants alternating (which goes first alternates too):

- plain: `with store.transaction() as tx: <insert one order row>`, then return: the
  worker acks the job afterwards, batched (ADR 0008), in a transaction of its own;
- tx ack: `with job.transaction() as tx: <insert one order row>`: the row and the ack
  commit together, one transaction per job, no batched ack.

jobs/s = jobs / the drain's wall time; the ratio is tx ack / plain per repetition (their
median is reported). Target: >= 0.8x. Beside it, the same ratio of jobs per CPU second of
this process (`time.process_time()`: the worker, and on SQLite the database too), which
other load on the machine moves less than wall time. Every job must be handled, every row
written, the queue empty afterwards. The script always exits 0.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/tx_ack.py`

import alkstore
import relay
from bench._common import (
    Backend,
    Metric,
    Run,
    base_parser,
    clear_jobs,
    fill_jobs,
    make_backend,
    progress,
)

QUEUE = "orders"
TARGET_RATIO = 0.8


@dataclass(frozen=True)
class Settings:
    engines: tuple[str, ...]
    reps: int
    jobs: int
    concurrency: int


def drain(
    backend: Backend, store: alkstore.Store, settings: Settings, tx_ack: bool
) -> tuple[float, float]:
    """Fill the queue, drain it with a worker whose handler writes one row; (jobs per
    second of wall time, jobs per CPU second of this process)."""
    clear_jobs(backend, store)
    with store.transaction() as tx:
        tx.connection.execute("DELETE FROM bench_orders")
    fill_jobs(backend, store, QUEUE, settings.jobs)
    backend.vacuum(store.namespace, "jobs")
    worker = relay.Worker(store, concurrency=settings.concurrency)
    insert = backend.insert_order

    if tx_ack:

        @worker.handler(QUEUE, concurrency=settings.concurrency)
        def handle(job: alkstore.Job[Any]) -> None:
            with job.transaction() as tx:
                insert(tx.connection, job.id)

    else:

        @worker.handler(QUEUE, concurrency=settings.concurrency)
        def handle(job: alkstore.Job[Any]) -> None:
            with store.transaction() as tx:
                insert(tx.connection, job.id)

    start, cpu = time.perf_counter(), time.process_time()
    worker.run(once=True)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    with store.transaction() as tx:
        rows = tx.connection.execute("SELECT count(*) FROM bench_orders").fetchone()[0]
    left = store.queue(QUEUE).stats()
    if rows != settings.jobs or left.ready or left.active or worker.counters["ack"] != rows:
        raise RuntimeError(f"{rows} of {settings.jobs} rows, left {left}, {worker.counters}")
    return settings.jobs / elapsed, settings.jobs / cpu


def run_engine(engine: str, settings: Settings) -> list[Metric]:
    backend = make_backend(engine)
    plain: list[tuple[float, float]] = []
    txack: list[tuple[float, float]] = []
    try:
        with backend.connect("bench_tx_ack") as store:
            store.migrate()
            backend.create_orders(store)
            drain(backend, store, settings, tx_ack=True)  # warm-up
            for rep in range(settings.reps):
                for variant in (True, False) if rep % 2 else (False, True):
                    (txack if variant else plain).append(drain(backend, store, settings, variant))
    finally:
        backend.close()
    detail = f"{settings.jobs:,} jobs, concurrency {settings.concurrency}"
    wall_t, wall_p = [t for t, _ in txack], [p for p, _ in plain]
    cpu_t, cpu_p = [t for _, t in txack], [p for _, p in plain]
    rows = [
        Metric(engine, "one-row handler, plain ack", "jobs/s", wall_p, detail=detail),
        Metric(engine, "one-row handler, tx ack", "jobs/s", wall_t, detail=detail),
        Metric(
            engine,
            "tx ack / plain ack",
            "x",
            [t / p for t, p in zip(wall_t, wall_p, strict=True)],
            TARGET_RATIO,
            detail=f"medians {median(wall_t):,.0f} / {median(wall_p):,.0f} jobs/s",
        ),
        Metric(
            engine,
            "tx ack / plain ack, per CPU second",
            "x",
            [t / p for t, p in zip(cpu_t, cpu_p, strict=True)],
            detail=f"medians {median(cpu_t):,.0f} / {median(cpu_p):,.0f} jobs per CPU s",
        ),
    ]
    for row in rows:
        progress(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--jobs", type=int, help="jobs per drain (5000, quick 1000)")
    parser.add_argument("--concurrency", type=int, default=8, help="handler concurrency")
    args = parser.parse_args(argv)
    settings = Settings(
        engines=args.engines,
        reps=args.reps or (1 if args.quick else 5),
        jobs=args.jobs or (1_000 if args.quick else 5_000),
        concurrency=args.concurrency,
    )
    run = Run("tx_ack", {**asdict(settings), "engines": ",".join(settings.engines)})
    run.announce()
    results = [m for e in settings.engines for m in run_engine(e, settings)]
    run.report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
