"""CPU per job: the worker runtime against the plain claim API, in one process.

    python bench/worker_cpu.py [--engines sqlite,postgres] [--jobs 60000] [--rounds 3]

On each engine, alternating per round: N no-op jobs are enqueued, then drained
(a) by a `claim_many(100)` / `ack_many` loop and (b) by `relay.Worker(store)` with one
no-op handler at its default concurrency, `run(once=True)`. CPU is this process's
`time.process_time()` over the drain (the SQLite engine's work runs in-process too;
PostgreSQL's server CPU is not counted), so a busy machine moves it far less than
the wall-clock rate, which is shown beside. Reported: medians over the rounds, and the
runtime/loop ratios (issue 13's target: runtime CPU/job <= 1.3x the loop's,
throughput >= 0.8x). Run it from the repository root; it always exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/worker_cpu.py`

import psycopg

import alkstore
import relay

PG_URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://root@127.0.0.1:5432/postgres")


def fill(q: alkstore.Queue, n: int) -> None:
    for start in range(0, n, 5_000):
        q.enqueue_many([{"i": i} for i in range(start, min(n, start + 5_000))])


def loop(store: alkstore.Store, n: int) -> tuple[float, float]:
    q = store.queue("loop")
    fill(q, n)
    cpu, wall = time.process_time(), time.perf_counter()
    done = 0
    while jobs := q.claim_many(100):
        q.ack_many(jobs)
        done += len(jobs)
    assert done == n, done
    return time.process_time() - cpu, time.perf_counter() - wall


def runtime(store: alkstore.Store, n: int) -> tuple[float, float]:
    q = store.queue("runtime")
    fill(q, n)
    worker = relay.Worker(store, maintenance_every=60)

    @worker.handler("runtime")
    def noop(job: alkstore.Job[dict[str, int]]) -> None:
        pass

    cpu, wall = time.process_time(), time.perf_counter()
    worker.run(once=True)
    taken = time.process_time() - cpu, time.perf_counter() - wall
    assert worker.counters["ack"] == n and q.stats().ready == 0, worker.counters
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    for engine in args.engines.split(","):
        namespace = f"bench_{uuid.uuid4().hex[:8]}"
        if engine == "sqlite":
            url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
        else:
            url = PG_URL
        store = alkstore.connect(url, namespace=namespace)
        store.migrate()
        results: dict[str, list[tuple[float, float]]] = {"loop": [], "runtime": []}
        try:
            for _ in range(args.rounds):
                results["loop"].append(loop(store, args.jobs))
                results["runtime"].append(runtime(store, args.jobs))
        finally:
            store.close()
            if engine == "postgres":
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA {namespace} CASCADE")
        summary: dict[str, Any] = {}
        for name, runs in results.items():
            cpu_us = median(c for c, _ in runs) / args.jobs * 1e6
            rate = args.jobs / median(w for _, w in runs)
            summary[name] = (cpu_us, rate)
            print(f"{engine:8s} {name:8s} {cpu_us:6.1f} us CPU/job  {rate:9,.0f} jobs/s")
        (loop_cpu, loop_rate), (run_cpu, run_rate) = summary["loop"], summary["runtime"]
        print(
            f"{engine:8s} runtime/loop: CPU {run_cpu / loop_cpu:.2f}x, "
            f"throughput {run_rate / loop_rate:.2f}x"
        )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
