"""PostgreSQL single-enqueue latency beside a deep queue (issue 13, item 6).

    python bench/enqueue_depth.py [--large 1000000] [--small 1000] [--blocks 20]
                                  [--per-block 500] [--no-checkpoint] [--json FILE]

One throwaway database on the shared server, two namespaces: `small` holds --small
waiting jobs, `large` --large (filled with one INSERT ... SELECT generate_series each,
then VACUUM ANALYZE). Unless --no-checkpoint, a CHECKPOINT follows the fill, so the
timed part does not run inside the checkpoint the fill's WAL set off. Then --blocks
blocks of --per-block `q.enqueue(payload)` calls (one autocommit statement each, as an
application makes them) alternate between the two queues (small, large, large,
small, ...); every call is timed. Reported: p50, p99 and p99.9 per queue over all its
calls, and large/small for each, with the load average. The target (issue 13): p99
beside 1M waiting <= 1.5x p99 beside 1k. Run it from the repository root; it always
exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/enqueue_depth.py`

import psycopg

import alkstore
from bench import _common


def timed_block(q: alkstore.Queue, n: int, out: list[float]) -> None:
    payload = {"order_id": 1, "note": "x" * 40}
    for _ in range(n):
        began = time.perf_counter()
        q.enqueue(payload)
        out.append((time.perf_counter() - began) * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--large", type=int, default=1_000_000, help="jobs waiting, deep queue")
    parser.add_argument("--small", type=int, default=1_000, help="jobs waiting, small queue")
    parser.add_argument("--blocks", type=int, default=20, help="timed blocks per queue")
    parser.add_argument("--per-block", type=int, default=500, help="enqueues per block")
    parser.add_argument("--no-checkpoint", action="store_true", help="no CHECKPOINT after fill")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()

    backend = _common.PostgresBackend()
    stores = {
        "small": alkstore.connect(backend.url, namespace="small"),
        "large": alkstore.connect(backend.url, namespace="large"),
    }
    try:
        for name, store in stores.items():
            store.migrate()
            count = args.small if name == "small" else args.large
            began = time.perf_counter()
            _common.fill_jobs(backend, store, "q", count)
            backend.vacuum(name, "jobs")
            print(f"{name}: {count:,} jobs waiting ({time.perf_counter() - began:.1f} s)")
        if not args.no_checkpoint:
            with psycopg.connect(backend.url, autocommit=True) as conn:
                conn.execute("CHECKPOINT")
        samples: dict[str, list[float]] = {"small": [], "large": []}
        queues = {name: store.queue("q") for name, store in stores.items()}
        for q in queues.values():
            timed_block(q, 200, [])  # warm: connections, prepared statements
        load_start = _common.load_average()
        for block in range(args.blocks):
            order = ("small", "large") if block % 2 == 0 else ("large", "small")
            for name in order:
                timed_block(queues[name], args.per_block, samples[name])
        results: dict[str, object] = {"load_start": load_start}
        for name, values in samples.items():
            results[name] = {f"p{pct:g}": _common.percentile(values, pct) for pct in (50, 99, 99.9)}
        small, large = results["small"], results["large"]
        assert isinstance(small, dict) and isinstance(large, dict)
        results["ratio"] = {key: large[key] / small[key] for key in small}
        results["load_end"] = _common.load_average()
        results["commit"] = _common.git_commit()
        results["checkpoint_after_fill"] = not args.no_checkpoint
        for name in ("small", "large", "ratio"):
            shown_values = results[name]
            assert isinstance(shown_values, dict)
            shown = "  ".join(f"{key} {value:7.3f}" for key, value in shown_values.items())
            print(f"{name:6} {shown}{' ms' if name != 'ratio' else ' (large/small)'}")
        print(f"load average {load_start:.2f} -> {results['load_end']:.2f}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        for store in stores.values():
            store.close()
        backend.close()


if __name__ == "__main__":
    main()
