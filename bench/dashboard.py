"""Dashboard benchmark (issue 18, docs/adr/0023): how long the dashboard takes to render
its pages beside a queue of a million waiting jobs. Target: the queue's page under 300 ms
on PostgreSQL.

Run it from the repository root (about 3 minutes on PostgreSQL; `--quick`: 100,000 jobs):

    python bench/dashboard.py [--quick] [--engines postgres] [--depth 1000000]
                              [--delayed] [--samples 30] [--json results.json]

One queue (`mail`) holds `depth` ready jobs (inserted in one statement, then VACUUM
ANALYZE), three small queues a few jobs each, and `mail` 1,000 dead letters. Each page is
fetched through Starlette's TestClient (the app in this process, no network): the median
and p95 of `samples` fetches after 3 warm-ups. Beside them, in the same run, the exact
counts a page would show without estimates (`Queue.info()`, `Store.queues()`, which read
every job): the baseline the estimates replace. `--delayed`: the queue's jobs are due in
an hour instead (scheduled, none ready). The script always exits 0.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/dashboard.py`

from starlette.testclient import TestClient

import alkstore
from bench._common import (
    Backend,
    base_parser,
    fill_jobs,
    git_commit,
    load_average,
    make_backend,
    percentile,
)
from relay.dashboard import create_app

TARGET_MS = 300.0
PAGES = {
    "queue page (first 50 jobs)": "/queues/mail",
    "queue page, deep (after id depth/2)": "/queues/mail?after={half}",
    "queue page, state=ready": "/queues/mail?state=ready",
    "queue page, state=running": "/queues/mail?state=running",
    "queue page, state=scheduled": "/queues/mail?state=scheduled",
    "queue page, state=expired": "/queues/mail?state=expired",
    "overview": "/",
    "queues": "/queues",
    "dead letters": "/queues/mail/dead",
}


def timed(call: Callable[[], object], samples: int) -> tuple[float, float]:
    """(median, p95) in ms of `samples` calls after 3 warm-ups."""
    for _ in range(3):
        call()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), percentile(times, 95)


def fill(store: alkstore.Store, depth: int, backend: Backend, delayed: bool) -> None:
    for name in ("audit", "billing", "search"):
        store.queue(name).enqueue_many([{"n": i} for i in range(5)])
    mail = store.queue("mail")
    for _ in range(1_000):
        mail.enqueue({"to": "x"}, max_attempts=1, priority=9)
        job = mail.claim()
        assert job is not None
        job.fail("smtp timeout")
    fill_jobs(backend, store, "mail", depth)
    if delayed:
        jobs = backend.table(store.namespace, "jobs")
        with store.transaction() as tx:
            tx.connection.execute(
                f"UPDATE {jobs} SET visible_at = visible_at + 3600000 WHERE queue = 'mail'"
            )


def run(engine: str, depth: int, samples: int, delayed: bool) -> list[dict[str, object]]:
    backend = make_backend(engine)
    rows: list[dict[str, object]] = []
    try:
        store = backend.connect("bench")
        store.migrate()
        fill(store, depth, backend, delayed)
        backend.vacuum("bench", "jobs")
        backend.vacuum("bench", "dead_letters")
        client = TestClient(create_app(store))
        half = store.queue("mail").jobs(limit=1)[0].id + depth // 2
        for label, path in PAGES.items():
            url = path.format(half=half)

            def fetch(url: str = url) -> None:
                response = client.get(url)
                assert response.status_code == 200, (url, response.status_code)

            median, p95 = timed(fetch, samples)
            rows.append({"engine": engine, "what": label, "median_ms": median, "p95_ms": p95})
        mail = store.queue("mail")
        for label, call in (
            ("baseline: exact Queue.info()", mail.info),
            ("estimated Queue.info(estimate=True)", lambda: mail.info(estimate=True)),
            ("baseline: exact Store.queues()", store.queues),
            ("estimated Store.queues(estimate=True)", lambda: store.queues(estimate=True)),
        ):
            median, p95 = timed(call, samples)
            rows.append({"engine": engine, "what": label, "median_ms": median, "p95_ms": p95})
        store.close()
    finally:
        backend.close()
    return rows


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--depth", type=int, help="ready jobs in the queue (default 1,000,000)")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--delayed", action="store_true", help="the jobs due in an hour")
    parser.set_defaults(engines=("postgres",))
    args = parser.parse_args()
    depth = args.depth or (100_000 if args.quick else 1_000_000)
    kind = "delayed" if args.delayed else "ready"
    print(f"# dashboard, {depth:,} {kind} jobs; commit {git_commit()}, load {load_average():.2f}")
    results = []
    for engine in args.engines:
        rows = run(engine, depth, args.samples, args.delayed)
        results += rows
        print(f"\n| {engine} | median ms | p95 ms |\n|---|---:|---:|")
        for row in rows:
            print(f"| {row['what']} | {row['median_ms']:.1f} | {row['p95_ms']:.1f} |")
        page = next(r for r in rows if r["what"] == "queue page (first 50 jobs)")
        verdict = "meets" if float(page["median_ms"]) < TARGET_MS else "MISSES"  # type: ignore[arg-type]
        print(f"\nqueue page: {verdict} the {TARGET_MS:.0f} ms target on {engine}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
