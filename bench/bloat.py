"""PostgreSQL drain throughput while another session holds a snapshot open (issue 13, item 8).

    python bench/bloat.py [--base 60] [--hold 600] [--after 60] [--batch 10000]
                          [--shared] [--json FILE]

A throwaway PostgreSQL cluster of its own (initdb into a temp dir, a free port, the
server's defaults but fsync off and shared_buffers 128MB, so autovacuum runs as it does
in production), or with --shared a throwaway database on the shared server (whose
autovacuum may be off: the figures are then those of a server that never vacuums);
one queue. The work is cycles of `enqueue_many(batch)` then a
drain of those jobs by a `claim_many(100)` / `ack_many` loop; each cycle's drain rate
(jobs/s) is recorded with its time. Three phases:

1. `base`: cycles for --base seconds, nothing else running.
2. `hold`: another session runs `BEGIN ISOLATION LEVEL REPEATABLE READ` and reads the
   jobs table, then stays idle in that transaction for --hold seconds. Its snapshot
   keeps every job deleted after it began (and every older version the claim's update
   left) from being removed: vacuum cannot, and index scans cannot mark the entries dead.
3. `after`: the snapshot's transaction ends; cycles for --after seconds.

Reported per phase: the median drain rate, the last minute's median (hold), the rate
relative to `base`, how long after the snapshot ended the rate came back to >= 0.95x of
base, and beside them the jobs table's dead tuples (pg_stat_user_tables, as the
statistics collector last saw them) and the table's and its indexes' sizes. The
target (issue 13): hold >= 0.7x base, after >= 0.95x base within a minute. Autovacuum
runs as the server is configured. Run it from the repository root; it always exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/bloat.py`

import psycopg

import alkstore
from bench import _common
from tests.faults import pg_cluster


def cycle(q: alkstore.Queue, batch: int) -> float:
    """Enqueue `batch` jobs, drain them; the drain's jobs/s."""
    for start in range(0, batch, 5_000):
        q.enqueue_many([{"i": i} for i in range(start, min(batch, start + 5_000))])
    done, began = 0, time.perf_counter()
    while done < batch:
        jobs = q.claim_many(100)
        if not jobs:
            break
        q.ack_many(jobs)
        done += len(jobs)
    return done / (time.perf_counter() - began)


def table_state(conn: psycopg.Connection[Any], namespace: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT s.n_live_tup, s.n_dead_tup, pg_relation_size(c.oid),"
        " pg_indexes_size(c.oid), s.autovacuum_count"
        " FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid"
        " WHERE s.schemaname = %s AND s.relname = 'jobs'",
        (namespace,),
    ).fetchone()
    assert row is not None
    live, dead, heap, indexes, autovacuums = row
    return {
        "live_tuples": live,
        "dead_tuples": dead,
        "heap_mb": round(heap / 2**20, 1),
        "indexes_mb": round(indexes / 2**20, 1),
        "autovacuums": autovacuums,
    }


def run_phase(
    q: alkstore.Queue, batch: int, seconds: float, t0: float
) -> list[tuple[float, float]]:
    """(seconds since t0 at the cycle's end, drain jobs/s) for each cycle."""
    rates: list[tuple[float, float]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rate = cycle(q, batch)
        rates.append((time.monotonic() - t0, rate))
        print(f"  t={rates[-1][0]:7.1f}s  {rate:9,.0f} jobs/s", flush=True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=float, default=60.0, help="seconds without the snapshot")
    parser.add_argument("--hold", type=float, default=600.0, help="seconds the snapshot is held")
    parser.add_argument("--after", type=float, default=60.0, help="seconds after it ends")
    parser.add_argument("--batch", type=int, default=10_000, help="jobs per cycle")
    parser.add_argument("--shared", action="store_true", help="use the shared server")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    if args.shared:
        backend = _common.PostgresBackend()
        try:
            bench(args, backend.url)
        finally:
            backend.close()
    else:
        pg_cluster.SETTINGS["shared_buffers"] = "128MB"  # the server's default
        with pg_cluster.pg_cluster() as cluster:
            bench(args, cluster.url)


def bench(args: argparse.Namespace, url: str) -> None:
    store = alkstore.connect(url, namespace="bench")
    results: dict[str, Any] = {"load_start": _common.load_average()}
    with psycopg.connect(url, autocommit=True) as conn:
        results["autovacuum"] = conn.execute("SHOW autovacuum").fetchone()
    try:
        store.migrate()
        q = store.queue("bloat")
        t0 = time.monotonic()
        stats = psycopg.connect(url, autocommit=True)
        print(f"base ({args.base:g} s)")
        base = run_phase(q, args.batch, args.base, t0)
        results["base"] = {"rates": base, **table_state(stats, "bench")}

        holder = psycopg.connect(url)
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM bench.jobs").fetchone()  # the snapshot is taken
        print(f"hold ({args.hold:g} s, a REPEATABLE READ snapshot open)")
        hold = run_phase(q, args.batch, args.hold, t0)
        results["hold"] = {"rates": hold, **table_state(stats, "bench")}
        holder.rollback()
        holder.close()
        released = time.monotonic() - t0

        print(f"after ({args.after:g} s)")
        after = run_phase(q, args.batch, args.after, t0)
        results["after"] = {"rates": after, **table_state(stats, "bench")}
        stats.close()

        base_rate = statistics.median(r for _, r in base)
        last_minute = [r for t, r in hold if t >= hold[-1][0] - 60] or [hold[-1][1]]
        back = next((t - released for t, r in after if r >= 0.95 * base_rate), None)
        results["summary"] = summary = {
            "base_median": base_rate,
            "hold_median": statistics.median(r for _, r in hold),
            "hold_last_minute_median": statistics.median(last_minute),
            "hold_min": min(r for _, r in hold),
            "after_median": statistics.median(r for _, r in after),
            "hold_ratio": statistics.median(r for _, r in hold) / base_rate,
            "hold_last_minute_ratio": statistics.median(last_minute) / base_rate,
            "after_ratio": statistics.median(r for _, r in after) / base_rate,
            "seconds_to_0.95": back,
            "load_end": _common.load_average(),
            "commit": _common.git_commit(),
        }
        print()
        for phase in ("base", "hold", "after"):
            state = {k: v for k, v in results[phase].items() if k != "rates"}
            print(f"{phase:6} cycles {len(results[phase]['rates']):4}  {state}")
        for name, value in summary.items():
            shown = f"{value:,.2f}" if isinstance(value, float) else value
            print(f"{name:24} {shown}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        store.close()


if __name__ == "__main__":
    main()
