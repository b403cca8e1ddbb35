"""What Prometheus metrics cost the worker: CPU per job with metrics off and on, in one
process, interleaved (docs/adr/0019).

    python bench/metrics_cost.py [--engines sqlite,postgres] [--jobs 20000] [--rounds 6]

Each round enqueues N no-op jobs and drains them with `relay.Worker(store)` (one no-op
handler, `run(once=True)`), once with metrics off and once on: `relay.metrics.serve(0)`
running and scraped every 0.5 s by a thread of this process, so the scrape's CPU counts.
The order alternates per round. CPU is `time.process_time()` over the drain (SQLite's
work runs in-process; PostgreSQL's server CPU is not counted), which other load on the
machine moves far less than the wall-clock rate. Once metrics were served, workers keep
handler durations for the rest of the process; the "off" workers are set back to none.
Reported: the medians and every round. Run it from the repository root; exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/metrics_cost.py`

import psycopg

import alkstore
import relay

PG_URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://root@127.0.0.1:5432/postgres")


def drain(store: alkstore.Store, n: int, metrics: bool) -> float:
    """CPU microseconds per job of one drain of `n` no-op jobs."""
    q = store.queue("cost")
    for start in range(0, n, 5_000):
        q.enqueue_many([{"i": i} for i in range(start, min(n, start + 5_000))])
    server = relay.metrics.serve(0, "127.0.0.1") if metrics else None
    stop = threading.Event()
    if server is not None:
        url = server.url

        def scrape() -> None:
            while not stop.wait(0.5):
                with urllib.request.urlopen(url, timeout=5) as response:
                    response.read()

        threading.Thread(target=scrape, name="scraper", daemon=True).start()
    worker = relay.Worker(store, maintenance_every=60)
    if not metrics:
        worker.counters.timings = None

    @worker.handler("cost")
    def noop(job: alkstore.Job[dict[str, int]]) -> None:
        pass

    cpu = time.process_time()
    worker.run(once=True)
    cpu = time.process_time() - cpu
    stop.set()
    if server is not None:
        server.close()
    assert worker.counters["ack"] == n, worker.counters
    return cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    for engine in args.engines.split(","):
        namespace = f"bench_{uuid.uuid4().hex[:8]}"
        url = f"sqlite:///{tempfile.mkdtemp()}/bench.db" if engine == "sqlite" else PG_URL
        store = alkstore.connect(url, namespace=namespace)
        store.migrate()
        runs: dict[bool, list[float]] = {False: [], True: []}
        try:
            for round_ in range(args.rounds):
                for metrics in (False, True) if round_ % 2 == 0 else (True, False):
                    runs[metrics].append(drain(store, args.jobs, metrics))
        finally:
            store.close()
            if engine == "postgres":
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA {namespace} CASCADE")
        for metrics, label in ((False, "off"), (True, "on")):
            each = " ".join(f"{us:.1f}" for us in runs[metrics])
            cpu = median(runs[metrics])
            print(f"{engine:8s} metrics {label:3s} {cpu:6.1f} us CPU/job ({each})")
        ratio = median(runs[True]) / median(runs[False])
        print(f"{engine:8s} on/off: {ratio:.2f}x")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
