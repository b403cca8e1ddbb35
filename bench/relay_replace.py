"""Relay benchmark for replace / debounce by key (docs/adr/0022, addendum 2026-12-01).

Run it from the repository root (about 2 minutes; `--quick` takes under one):

    python bench/relay_replace.py [--quick] [--engines sqlite,postgres] [--reps 3]
                                  [--events 50000] [--keys 1000] [--json results.json]

On each engine a log of `--events` events with `--keys` distinct keys (key i % keys, a
set-based INSERT, untimed) is relayed from the beginning into one subscription, with
`relay_batch()` (batch 5,000) until caught up: events/s = events / time. Each repetition
measures, in a rotating order, with the jobs table emptied before each:

- baseline: the relay step as it was before replace by key (its `relay_bounds` without
  the replacing subscriptions' column, then `relay_insert`, the same statement), driven
  here as `_routing.relay_batch` drove it;
- plain: `store.relay_batch()` now, for a subscription without options (the path every
  existing subscription takes: it must cost what the baseline costs);
- dedupe: `subscribe(..., dedupe_by_key=True)` (relay_insert, one job per key);
- replace: `subscribe(..., replace_by_key=True)` (fanout.sql: relay_release, relay_replace).

Reported: the medians and each variant's ratio to the baseline measured in the same
repetition (median of the per-repetition ratios), with the load average.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/relay_replace.py`

import alkstore
from alkstore import _sql
from bench._common import Backend, Metric, Run, base_parser, clear_jobs, make_backend, progress

RELAY_BATCH = 5_000
VARIANTS = ("baseline", "plain", "dedupe", "replace")
OPTIONS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "plain": {},
    "dedupe": {"dedupe_by_key": True},
    "replace": {"replace_by_key": True},
}


def fill_keyed_log(backend: Backend, store: alkstore.Store, count: int, keys: int) -> None:
    """`count` numbered events, event i with key "k{i % keys}" (one statement)."""
    events = backend.table(store.namespace, "events")
    if backend.name == "postgres":
        head = backend.table(store.namespace, "log_head")
        statements: list[tuple[str, tuple[Any, ...]]] = [
            (
                f"INSERT INTO {events} (position, type, key, payload) "
                "SELECT g, 'bench.order_placed', 'k' || (g %% %s), jsonb_build_object("
                "'type', 'bench.order_placed', 'order_id', g, 'total_cents', 1) "
                "FROM generate_series(1, %s) AS g",
                (keys, count),
            ),
            (f"UPDATE {head} SET head = %s", (count,)),
        ]
    else:
        statements = [
            (
                "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
                f"INSERT INTO {events} (type, key, payload, appended_at) "
                "SELECT 'bench.order_placed', 'k' || (i % ?), json_object("
                "'type', 'bench.order_placed', 'order_id', i, 'total_cents', 1), 0 FROM c",
                (count, keys),
            )
        ]
    with store.transaction() as tx:
        for statement, params in statements:
            tx.connection.execute(statement, params)
    backend.vacuum(store.namespace, "events")


def baseline_bounds(backend: Backend, namespace: str) -> str:
    """relay_bounds as it was: the same statement without the replacing column."""
    package = f"alkstore.{backend.name}"
    query = str(_sql.queries(package, namespace)["relay_bounds"])
    if backend.name == "postgres":
        column = (
            ",\n(SELECT coalesce(jsonb_agg(queue), '[]')::text FROM subs "
            "WHERE replace_ms IS NOT NULL)"
        )
        old = query.replace(column, "").replace("checkpoint, replace_ms FROM", "checkpoint FROM")
    else:
        column = (
            f",\n(SELECT json_group_array(queue) FROM {namespace}__subscriptions\n"
            "WHERE sink IS NULL AND replace_ms IS NOT NULL)"
        )
        old = query.replace(column, "")
    if old == query or "replace_ms" in old:
        raise RuntimeError("relay_bounds changed: update the baseline")
    return old


def baseline_batch(store: alkstore.Store, bounds: str) -> tuple[int, int]:
    """The relay step before replace by key (no lease), as _routing.relay_batch ran it."""
    engine = store.engine
    engine.sequence()
    with engine.transaction() as conn:
        low, high, queues = conn.execute(bounds, {"batch": RELAY_BATCH}).fetchall()[0]
        if low is None or high <= low:
            return 0, 0
        params = {"low": low, "high": high, "now": None, "queues": queues}
        jobs = int(engine.run_in(conn, "relay_insert", params)[0][0])
        engine.run_in(conn, "relay_advance", params)
    if jobs:
        engine.committed()
    return jobs, int(high - low)


def measure(
    backend: Backend, store: alkstore.Store, variant: str, bounds: str
) -> tuple[float, int]:
    """Relay the whole log for `variant`: (events/s, jobs made)."""
    for subscription in store.subscriptions():
        store.unsubscribe(subscription.queue)
    clear_jobs(backend, store)
    store.subscribe("relayed", ["bench.*"], start="beginning", **OPTIONS[variant])
    backend.vacuum(store.namespace, "jobs")
    events = jobs = 0
    start = time.perf_counter()
    while True:
        if variant == "baseline":
            created, covered = baseline_batch(store, bounds)
        else:
            created, covered = store.relay_batch(batch=RELAY_BATCH)
        events += covered
        jobs += created
        if not covered:
            return events / (time.perf_counter() - start), jobs


def run_engine(engine: str, reps: int, count: int, keys: int) -> list[Metric]:
    backend = make_backend(engine)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    made: dict[str, int] = {}
    try:
        with backend.connect("bench_replace") as store:
            store.migrate()
            fill_keyed_log(backend, store, count, keys)
            bounds = baseline_bounds(backend, store.namespace)
            for rep in range(reps):
                shift = rep % len(VARIANTS)
                for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                    rate, made[variant] = measure(backend, store, variant, bounds)
                    rates[variant].append(rate)
    finally:
        backend.close()
    rows = []
    for variant in VARIANTS:
        ratios = [r / b for r, b in zip(rates[variant], rates["baseline"], strict=True)]
        row = Metric(
            engine,
            f"relay {count:,} events on {keys:,} keys: {variant}",
            "ev/s",
            rates[variant],
            detail=f"{made[variant]:,} jobs; {median(ratios):.2f}x baseline "
            f"({min(ratios):.2f}-{max(ratios):.2f})",
        )
        progress(row)
        rows.append(row)
    return rows


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--events", type=int, help="events in the log (default 50,000)")
    parser.add_argument("--keys", type=int, default=1_000, help="distinct event keys")
    args = parser.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    count = args.events or (10_000 if args.quick else 50_000)
    run = Run("relay replace", {"reps": reps, "events": count, "keys": args.keys})
    run.announce()
    rows: list[Metric] = []
    for engine in args.engines:
        rows += run_engine(engine, reps, count, args.keys)
    run.report(rows, args.json)


if __name__ == "__main__":
    main()
