"""What the ordered queues' promotion trigger costs an ack_many on PostgreSQL, measured by
the server (docs/adr/0021, addendum 2026-12-01).

Run it from the repository root (about a minute):

    python bench/promote_cost.py [--reps 3] [--rounds 40] [--batch 100] [--keys 1000]

Each round claims `--batch` jobs (`claim_many`) and acks them with the ack_many statement
under `EXPLAIN (ANALYZE)`: the server's execution time of the statement, its triggers
included, per acked job, which the client's round trip and the machine's other load
inflate far less than a wall-clock drain (bench/flow.py). Three schemas side by side, one
round of each in turn (each first in turn):

- `row`: the promotion trigger of migration 0008 (a row trigger, `WHEN grp IS NOT NULL
  AND held_due IS NULL`), put back in place of migration 0012's;
- `statement`: migration 0012's statement trigger (REFERENCING OLD TABLE);
- `none`: no promotion trigger (the floor; unordered queue only: without the trigger an
  ordered queue stops at its heads).

once for an unordered queue and once for an ordered one (`--keys` keys, the jobs
interleaved by key: each ack of a head promotes its key's next job). Medians of the
rounds' per-job times, then of `--reps` repetitions.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/promote_cost.py`

import psycopg

import alkstore
from alkstore import _sql
from bench._common import base_parser, git_commit, load_average, make_backend

QUEUE = "cost"
MIGRATIONS = Path(__file__).resolve().parents[1] / "alkstore/postgres/sql/migrations"
VARIANTS = ("row", "statement", "none")


def row_trigger(namespace: str) -> list[str]:
    """Migration 0008's promotion function and row trigger, in place of 0012's."""
    text = (MIGRATIONS / "0008_flow_control.sql").read_text().replace("{ns}", namespace)
    function = re.search(r"CREATE FUNCTION \S+\.jobs_promote\(\).*?END \$\$;", text, re.S)
    trigger = re.search(r"CREATE TRIGGER jobs_promote .*?;", text, re.S)
    assert function and trigger, "migration 0008 no longer has its row trigger"
    return [
        f"DROP TRIGGER jobs_promote ON {namespace}.jobs",
        f"DROP FUNCTION {namespace}.jobs_promote()",
        function[0],
        trigger[0],
    ]


class Schema:
    """One namespace with one variant of the trigger, filled with `jobs` jobs."""

    def __init__(self, url: str, variant: str, ordered: bool, keys: int, jobs: int) -> None:
        self.url, self.variant = url, variant
        self.store = alkstore.connect(url, namespace=f"b_{uuid.uuid4().hex[:10]}")
        self.store.migrate()
        ns = self.store.namespace
        with psycopg.connect(url, autocommit=True) as conn:
            setup = {"row": row_trigger(ns), "none": [f"DROP TRIGGER jobs_promote ON {ns}.jobs"]}
            for statement in setup.get(variant, []):
                conn.execute(statement.encode())
        self.queue = self.store.queue(QUEUE)
        if ordered:
            self.queue.configure(ordered=True)
        for start in range(0, jobs, 1_000):
            with self.store.transaction() as tx:
                for n in range(start, min(jobs, start + 1_000)):
                    tx.enqueue(QUEUE, {"n": n}, group=f"k{n % keys}")
        ack_many = _sql.queries("alkstore.postgres", ns)["ack_many"]
        self.ack_many = "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + ack_many
        self.conn = psycopg.connect(url, autocommit=True)

    def round(self, batch: int) -> float:
        """µs of server time per job of one ack_many of `batch` claimed jobs."""
        jobs = self.queue.claim_many(batch)
        assert len(jobs) == batch, "the schema ran out of jobs"
        pairs = json.dumps([[job.id, job.lease_token] for job in jobs])
        row = self.conn.execute(self.ack_many.encode(), {"pairs": pairs}).fetchone()
        assert row is not None
        plan: dict[str, Any] = row[0][0]
        return float(plan["Execution Time"]) * 1000 / batch

    def close(self) -> None:
        namespace = self.store.namespace
        self.conn.close()
        self.store.close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {namespace} CASCADE".encode())


def measure(url: str, ordered: bool, rounds: int, batch: int, keys: int) -> dict[str, float]:
    variants = VARIANTS[:2] if ordered else VARIANTS
    schemas = [Schema(url, v, ordered, keys, rounds * batch + batch) for v in variants]
    try:
        times: dict[str, list[float]] = {v: [] for v in variants}
        for n in range(rounds):
            for schema in schemas[n % len(schemas) :] + schemas[: n % len(schemas)]:
                times[schema.variant].append(schema.round(batch))
        return {v: median(t) for v, t in times.items()}
    finally:
        for schema in schemas:
            schema.close()


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1_000)
    args = parser.parse_args()
    reps = args.reps or 3
    print(f"commit {git_commit()}, load {load_average():.1f}, ack_many of {args.batch} jobs")
    backend = make_backend("postgres")
    try:
        for ordered in (False, True):
            results = [
                measure(backend.url, ordered, args.rounds, args.batch, args.keys)
                for _ in range(reps)
            ]
            print(f"{'ordered' if ordered else 'unordered'} queue, server µs per acked job:")
            for v in results[0]:
                each = ", ".join(f"{r[v]:.2f}" for r in results)
                print(f"  {v:>9}: {median(r[v] for r in results):.2f} (each rep: {each})")
    finally:
        backend.close()


if __name__ == "__main__":
    main()
