"""Claim cost beside delayed jobs: the per-level claim against the walk it replaced.

    python bench/claim_delayed.py [--engines sqlite,postgres] [--depths 0,100000,1000000]
                                  [--reps 5] [--quick] [--json FILE]

Per engine, one queue in a throwaway database. For each depth of delayed jobs (built up
with `enqueue_many(..., delay=3600)`) and each number of ready jobs (0, 1, 100): one claim
of up to 100 jobs (the statement `claim_many(100)` runs, `go` = 1), each variant on a
connection of its own, in alternating order, `--reps` rounds of up to PER_ROUND claims:

- `walk`: the claim as it was before issue 13 (its text is tests/claim_walk.py's): one walk of the
  claim index with `visible_at <= now` as a filter. On SQLite twice: as connections were
  set up before (the statement compiled again on every run) and with the query planner
  stability guarantee alkstore's connections now keep (`walk+qpsg`).
- `levels`: the engine's `claim` now: a range of the claim index per priority level.

A timed claim is SQLite's BEGIN IMMEDIATE ... COMMIT (how long it holds the write lock)
or one autocommit PostgreSQL statement (prepared, as psycopg does from the 5th run on;
`synchronous_commit = off`: the WAL flush of a claim that wrote would hide the claim).
The claimed jobs are put back untimed (visible again at their run time, lease cleared,
attempt uncounted), so every run sees the same rows. Then two shapes of priority levels
with nothing ready: 2,000 levels of one delayed job each (the worst case for the levels:
CLAIM_LEVELS probes, then the walk as before) and 40 levels of 2,500. Reported: median
microseconds per claim and levels / walk. Run it from the repository root.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/claim_delayed.py`

import apsw
import psycopg

import alkstore
from alkstore import _queue, _sql
from alkstore.sqlite._seam import configure, positional
from bench._common import base_parser, git_commit, load_average, make_backend
from tests import claim_walk

N = 100  # jobs a claim asks for
LEASE_MS = 30_000
READY = (0, 1, 100)
PER_ROUND = 15  # claims per variant and round, fewer when a round passes ROUND_SECONDS
ROUND_SECONDS = 0.3
CHUNK = 50_000  # jobs per enqueue_many while building the depth

# The walk's text is the reference the per-level claim is held to (tests/claim_walk.py);
# here it returns what alkstore's claim returns, so both fetch the same columns.
SQLITE_NOW = claim_walk.SQLITE_NOW
SQLITE_WALK = claim_walk.SQLITE.replace(
    "RETURNING id\n",
    "RETURNING id, queue, priority, claimed_for, attempts, max_attempts, backoff, lease_token,"
    " lease_ms, enqueued_at, type, key, position, headers, payload, progress, started\n",
)
PG_NOW = claim_walk.PG_NOW
PG_UP_FOR_LEASE = claim_walk.PG_UP_FOR_LEASE
PG_WALK = claim_walk.POSTGRES.replace(
    "RETURNING j.id\n",
    "RETURNING j.id, j.queue, j.priority, j.claimed_for, j.attempts, j.max_attempts,"
    " j.backoff::text, j.lease_token, j.lease_ms, j.enqueued_at, j.type, j.key, j.position,"
    " j.headers::text, j.payload::text, j.progress::text, j.started\n",
)
assert SQLITE_WALK != claim_walk.SQLITE and PG_WALK != claim_walk.POSTGRES

PUT_BACK = (  # a claimed job as it was: visible at its run time, no lease, attempt uncounted
    "UPDATE {jobs} SET visible_at = claimed_for, lease_token = NULL, lease_ms = NULL, "
    "attempts = attempts - 1, started = {false} WHERE id IN ({ids})"
)

Claim = Callable[[str], list[int]]  # queue -> ids claimed (timed by the caller)


class Sqlite:
    def __init__(self, path: str, namespace: str) -> None:
        self.namespace = namespace
        walk = SQLITE_WALK.replace("{now}", SQLITE_NOW).replace("{ns}", namespace)
        levels = _sql.queries("alkstore.sqlite", namespace)["claim"]
        self.conns: dict[str, apsw.Connection] = {}
        self.variants: dict[str, Claim] = {}
        for name, text, qpsg in (("walk", walk, 0), ("walk+qpsg", walk, 1), ("levels", levels, 1)):
            conn = apsw.Connection(path)
            configure(conn)  # the engine's settings, then QPSG as the variant says
            conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, qpsg)
            self.conns[name] = conn
            self.variants[name] = self._claim(conn, *positional(text))

    @staticmethod
    def _claim(conn: apsw.Connection, query: str, bind: Any) -> Claim:
        def claim(queue: str) -> list[int]:
            params = {"queue": queue, "now": None, "lease_ms": LEASE_MS, "n": N, "go": 1}
            values = bind({**params, "levels": _queue.CLAIM_LEVELS})
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(query, values).fetchall()
            conn.execute("COMMIT")
            return [int(row[0]) for row in rows]  # type: ignore[arg-type]

        return claim

    def put_back(self, ids: list[int]) -> None:
        if ids:
            jobs = f"{self.namespace}__jobs"
            marks = ", ".join("?" * len(ids))
            conn = self.conns["levels"]
            with conn:
                conn.execute(PUT_BACK.format(jobs=jobs, false=0, ids=marks), ids)

    def delete(self, ids: list[int]) -> None:
        conn = self.conns["levels"]
        with conn:
            conn.executemany(
                f"DELETE FROM {self.namespace}__jobs WHERE id = ?", [(i,) for i in ids]
            )

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


class Postgres:
    def __init__(self, url: str, namespace: str) -> None:
        self.namespace = namespace
        up_for_lease = PG_UP_FOR_LEASE.replace("{now}", PG_NOW)
        walk = PG_WALK.replace("{up_for_lease}", up_for_lease).replace("{now}", PG_NOW)
        walk = walk.replace("{ns}", namespace)
        levels = _sql.queries("alkstore.postgres", namespace)["claim"]
        self.url, self.texts = url, {"walk": walk, "levels": levels}
        self.conns: dict[str, psycopg.Connection[Any]] = {}
        self.variants: dict[str, Claim] = {}
        self.tidy = psycopg.connect(url, autocommit=True)  # puts jobs back: not a claimer
        self.fresh()

    def fresh(self) -> None:
        """New sessions: PostgreSQL chooses between per-run and generic plans by the costs
        of the plans a prepared statement has had so far, so one session carried from state
        to state would measure the states before."""
        for conn in self.conns.values():
            conn.close()
        for name, text in self.texts.items():
            conn = psycopg.connect(self.url, autocommit=True)
            # the WAL flush at commit (2-4 ms on this disk, when a claim wrote anything, or
            # pruned a page) would hide the claim itself
            conn.execute("SET synchronous_commit = off")
            self.conns[name] = conn
            self.variants[name] = self._claim(conn, text)

    @staticmethod
    def _claim(conn: psycopg.Connection[Any], query: str) -> Claim:
        def claim(queue: str) -> list[int]:
            params = {"queue": queue, "now": None, "lease_ms": LEASE_MS, "n": N, "go": 1}
            params["levels"] = _queue.CLAIM_LEVELS
            rows = conn.execute(query, params, prepare=True).fetchall()
            return [row[0] for row in rows]

        return claim

    def put_back(self, ids: list[int]) -> None:
        if ids:
            jobs = f"{self.namespace}.jobs"
            statement = PUT_BACK.format(jobs=jobs, false="false", ids="SELECT unnest(%s::bigint[])")
            self.tidy.execute(statement, (ids,))

    def delete(self, ids: list[int]) -> None:
        statement = f"DELETE FROM {self.namespace}.jobs WHERE id = ANY(%s)"
        self.tidy.execute(statement, (ids,))

    def plans(self) -> str:
        """How the server planned each variant's prepared claim: generic or per run."""
        query = (
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%SKIP LOCKED%%'"
        )
        found = {name: conn.execute(query).fetchall() for name, conn in self.conns.items()}
        return "; ".join(f"{name}: (generic, per-run) plans {rows}" for name, rows in found.items())

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.tidy.close()


def measure(
    engine: Sqlite | Postgres, queue: str, reps: int, tidy: Callable[[], None]
) -> dict[str, float]:
    """Median microseconds per claim of each variant, alternating their order by round;
    `tidy` between rounds that claimed jobs (PostgreSQL: VACUUM, so the dead versions the
    put-backs leave do not pile up round after round)."""
    if isinstance(engine, Postgres):
        engine.fresh()
    samples: dict[str, list[float]] = {name: [] for name in engine.variants}
    names = list(engine.variants)
    for name in names:  # warm up: compile; prepare, then PostgreSQL's 5 per-run plans
        for _ in range(8):
            engine.put_back(engine.variants[name](queue))
    claimed: set[int] = set()
    for rep in range(reps):
        if max(claimed, default=0):  # put-backs left dead versions
            tidy()
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            claim, start = engine.variants[name], time.perf_counter()
            for _ in range(PER_ROUND):
                before = time.perf_counter()
                ids = claim(queue)
                samples[name].append(time.perf_counter() - before)
                engine.put_back(ids)
                claimed.add(len(ids))
                if time.perf_counter() - start > ROUND_SECONDS:
                    break
    assert len(claimed) == 1, f"the variants claimed different numbers of jobs: {claimed}"
    result = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
    if isinstance(engine, Postgres):
        print(f"    {engine.plans()}")
    return result


def build(store: alkstore.Store, queue: str, delayed: int, have: int) -> None:
    q = store.queue(queue)
    for start in range(have, delayed, CHUNK):
        q.enqueue_many(list(range(start, min(delayed, start + CHUNK))), delay=3600)


def run_engine(name: str, depths: list[int], reps: int) -> list[dict[str, Any]]:
    backend = make_backend(name)
    namespace = f"bench_{uuid.uuid4().hex[:8]}"
    store = alkstore.connect(backend.url, namespace=namespace)
    store.migrate()
    engine: Sqlite | Postgres
    if name == "sqlite":
        engine = Sqlite(backend.url.removeprefix("sqlite:///"), namespace)
    else:
        engine = Postgres(backend.url, namespace)
    results: list[dict[str, Any]] = []
    try:
        have = 0
        q = store.queue("bench")

        def tidy() -> None:
            if name == "postgres":
                backend.vacuum(namespace, "jobs")

        for depth in depths:
            started = time.perf_counter()
            build(store, "bench", depth, have)
            have = depth
            backend.vacuum(namespace, "jobs")
            built = time.perf_counter() - started
            ready: list[int | None] = []
            for want in READY:
                ready += q.enqueue_many(list(range(want - len(ready))))
                row = {"engine": name, "delayed": depth, "ready": want, "levels": 1}
                us = measure(engine, "bench", reps, tidy)
                results.append({**row, "us": us, "build_s": built})
                report(results[-1])
            engine.delete([job for job in ready if job is not None])
        for levels, per_level in ((2000, 1), (40, 2500)):
            queue = f"levels{levels}"
            specs = [
                alkstore.JobSpec(i, priority=p, delay=3600)
                for p in range(levels)
                for i in range(per_level)
            ]
            for start in range(0, len(specs), CHUNK):
                store.queue(queue).enqueue_many(specs[start : start + CHUNK])
            backend.vacuum(namespace, "jobs")
            row = {"engine": name, "delayed": len(specs), "ready": 0, "levels": levels}
            results.append({**row, "us": measure(engine, queue, reps, tidy)})
            report(results[-1])
    finally:
        engine.close()
        store.close()
        backend.close()
    return results


def report(row: dict[str, Any]) -> None:
    us = row["us"]
    before = us["walk"]
    cells = "  ".join(f"{name} {value:10,.1f} us" for name, value in us.items())
    print(
        f"{row['engine']:8s} {row['delayed']:>9,} delayed {row['ready']:>3} ready "
        f"{row['levels']:>5} level(s)  {cells}  levels/walk {us['levels'] / before:7.3f}  "
        f"load {load_average():.1f}",
        flush=True,
    )


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--depths", default="0,100000,1000000", help="delayed jobs, ascending")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    if args.quick:
        depths = [0, 20_000]
    reps = args.reps or (1 if args.quick else 5)
    print(f"commit {git_commit()}; load average {load_average():.2f}; {reps} rounds")
    results = []
    for engine in args.engines:
        results += run_engine(engine, depths, reps)
    print(f"load average {load_average():.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
