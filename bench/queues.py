"""Queue benchmark: enqueue, claim+ack drains and claim scaling, beside raw SQL.

Run it from the repository root (about 3 minutes; `--quick` takes under one):

    python bench/queues.py [--quick] [--engines sqlite,postgres] [--reps 3]
                           [--seconds 2] [--drain-jobs 20000] [--drain-cap 2.5]
                           [--large 1000000] [--bulk 50000] [--only bulk]
                           [--json results.json] [--enqueue-only]

On each engine, in one run:

1. single enqueue, one job per transaction: `q.enqueue(payload)` vs a raw single-row
   INSERT of the same row (same columns and values, payload pre-encoded) in the same
   transaction shape alkstore uses (SQLite: BEGIN IMMEDIATE ... COMMIT; PostgreSQL: one
   autocommit statement). Target: ratio >= 0.85. Alternating slices, as bench/append.py.
   Beside it, the transactional enqueue: `with store.transaction() as tx: tx.enqueue(...)`
   vs a hand-written driver transaction inserting the same row (BEGIN [IMMEDIATE],
   INSERT ... RETURNING id, COMMIT). Target: ratio >= 0.9 (issue 13, item 3).
2. batched enqueue: `q.enqueue_many(100 payloads)` in jobs/s, beside a raw `executemany`
   of the same 100 rows in one transaction.
2b. bulk enqueue (docs/adr/0013): `q.enqueue_many(50,000 payloads)` against the raw bulk
   insert of the same rows in one transaction: PostgreSQL a psycopg `COPY` (write_row), SQLite
   an apsw `executemany` of an INSERT ... RETURNING id. Then the same with per-job options
   (`alkstore.JobSpec` with delay, priority, dedupe_key, max_attempts) against the raw insert
   of those rows. Medians of `--reps` (at least 3) rounds; in each the four runs alternate
   (ours, raw, raw, ours, ...) and start from an empty jobs table. Targets: both ratios >=
   0.8; the JobSpec batch's jobs/s beside the plain batch's is printed with the raw's own
   ratio (dedupe keys cost the database an index entry per row). Last, `tx.append_many` of
   50,000 events against the raw bulk insert of the same event rows (target >= 0.8).
3. drain: 20,000 no-op jobs (filled with SQL) claimed with `claim_many(n)` and acked with
   `ack_many(jobs)`, n = 1, 10, 100, in one process; beside the raw drain (the engine's own
   `claim` and `ack_many` statements from sql/queues.sql run directly with the driver).
   A drain stops after `--drain-cap` seconds if not done (small batches on PostgreSQL,
   where each statement is a commit). Targets at n = 100: >= 20,000 jobs/s on PostgreSQL,
   >= 40,000 jobs/s on SQLite.
4. claim scaling: claim()+ack() of single jobs from a queue with 1,000 waiting jobs vs
   one with 1,000,000 (each in its own namespace, filled with generate_series / a
   recursive CTE); every 100 claims the queue is topped up again outside the timed part.
   Target: rate at 1M >= 0.8x the rate at 1k.

SQLite runs on a file in a temp directory; PostgreSQL on a throwaway database
`alkstore_bench_<random>` (via $ALKSTORE_BENCH_PG, default
postgresql://root@127.0.0.1:5432/test), dropped WITH (FORCE) at the end. The table shows
medians of `--reps` repetitions (A/B variants alternate within each), their range,
targets and PASS/FAIL; the script always exits 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/queues.py`

import alkstore
from alkstore import _leases, _queue, _sql
from bench._common import (
    Backend,
    Metric,
    Op,
    OpFactory,
    Run,
    Runner,
    Tally,
    base_parser,
    clear_jobs,
    fill_jobs,
    interleave,
    make_backend,
    now_ms,
    order_event,
    progress,
)

SINGLE_TARGET = 0.85  # q.enqueue / raw INSERT
TX_TARGET = 0.9  # store.transaction() + tx.enqueue / raw BEGIN, INSERT, COMMIT
DRAIN_TARGETS = {"postgres": 20_000.0, "sqlite": 40_000.0}  # jobs/s at claim batch 100
SCALE_TARGET = 0.8  # claim rate at 1M / at 1k
BULK_TARGET = 0.8  # enqueue_many(50k) / the raw bulk insert of the same rows
BULK_COLUMNS = (
    "queue, priority, visible_at, enqueued_at, expires_at, max_attempts, backoff, dedupe_key, "
    "type, key, position, headers, payload"
)
ENQUEUE_BATCH = 100
DRAIN_BATCHES = (1, 10, 100)
SMALL = 1_000
TOP_UP_EVERY = 100
SLICE_SECONDS = 0.25
PAYLOAD = {"order_id": 123_456, "customer": "customer-56", "total_cents": 4_999, "express": False}

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Settings:
    engines: tuple[str, ...]
    reps: int
    seconds: float
    drain_jobs: int
    drain_cap: float
    large: int
    enqueue_only: bool = False
    bulk: int = 50_000
    only: str | None = None

    @property
    def slices(self) -> int:
        return max(2, round(self.seconds / SLICE_SECONDS))


# -- raw SQL on a caller-owned connection ------------------------------------------------


class RawSql:
    """Statements run directly with the driver, in the transaction shape alkstore uses:
    BEGIN IMMEDIATE ... COMMIT on SQLite, one autocommit statement on PostgreSQL."""

    def __init__(self, backend: Backend, namespace: str) -> None:
        self.sqlite = backend.name == "sqlite"
        self.engine_name = backend.name
        self.conn: Any = backend.autocommit_connection()
        self.queries = _sql.queries(f"alkstore.{backend.name}", namespace)
        jobs = backend.table(namespace, "jobs")
        mark, jsonb = ("?", "") if self.sqlite else ("%s", "::jsonb")
        columns = (
            "queue, priority, visible_at, enqueued_at, expires_at, max_attempts, backoff, "
            "dedupe_key, type, key, position, headers, payload"
        )
        values = f"{mark}, 0, {mark}, {mark}, NULL, 5, NULL, NULL, NULL, NULL, NULL, NULL, "
        self.insert_job = (
            f"INSERT INTO {jobs} ({columns}) VALUES ({values}{mark}{jsonb}) RETURNING id"
        )

    def run(self, query: str, params: Any) -> list[Any]:
        conn = self.conn
        if not self.sqlite:
            return conn.execute(query, params).fetchall()  # type: ignore[no-any-return]
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows: list[Any] = conn.execute(query, params).fetchall()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return rows

    def enqueue(self, queue: str, payload: str) -> int:
        now = now_ms()
        return int(self.run(self.insert_job, (queue, now, now, payload))[0][0])

    def enqueue_in_tx(self, queue: str, payload: str) -> int:
        """The same row in a hand-written transaction: BEGIN [IMMEDIATE], INSERT, COMMIT."""
        now = now_ms()
        if self.sqlite:
            return int(self.run(self.insert_job, (queue, now, now, payload))[0][0])
        with self.conn.transaction():
            return int(self.conn.execute(self.insert_job, (queue, now, now, payload)).fetchone()[0])

    def enqueue_many(self, queue: str, payloads: list[str]) -> list[int]:
        now = now_ms()
        params = [(queue, now, now, p) for p in payloads]
        conn = self.conn
        if self.sqlite:
            conn.execute("BEGIN IMMEDIATE")
            try:
                ids = [row[0] for row in conn.executemany(self.insert_job, params)]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return ids
        with conn.transaction():
            cursor = conn.cursor()
            cursor.executemany(self.insert_job, params, returning=True)
            ids = []
            while True:
                ids.append(cursor.fetchone()[0])
                if not cursor.nextset():
                    break
            return ids

    def bulk(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        """The rows (all 13 columns) in one transaction: COPY on PostgreSQL, executemany of
        an INSERT ... RETURNING id on SQLite (alkstore returns ids; COPY cannot)."""
        conn = self.conn
        if self.sqlite:
            marks = ", ".join(f"?{i}" for i in range(1, 14))
            query = f"INSERT INTO {table} ({BULK_COLUMNS}) VALUES ({marks}) RETURNING id"
            conn.execute("BEGIN IMMEDIATE")
            try:
                ids = [row[0] for row in conn.executemany(query, rows)]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            assert len(ids) == len(rows)
            return
        with (
            conn.transaction(),
            conn.cursor().copy(f"COPY {table} ({BULK_COLUMNS}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)

    def bulk_events(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        """Event rows (type, key, headers, payload) in one transaction, as `bulk` does."""
        conn = self.conn
        if self.sqlite:
            query = (
                f"INSERT INTO {table} (type, key, headers, payload, appended_at) "
                "VALUES (?1, ?2, ?3, ?4, CAST(unixepoch('subsec') * 1000 AS INTEGER))"
            )
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(query, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return
        statement = f"COPY {table} (type, key, headers, payload) FROM STDIN"
        with conn.transaction(), conn.cursor().copy(statement) as copy:
            for row in rows:
                copy.write_row(row)

    def claim_ack(self, queue: str, n: int) -> int:
        """The engine's own claim and ack_many statements; returns how many jobs."""
        params = {"queue": queue, "now": now_ms(), "lease_ms": 30_000, "n": n, "go": 1}
        params["levels"] = _queue.CLAIM_LEVELS
        rows = self.run(self.queries["claim"], params)
        if rows:
            ids, tokens = [row[0] for row in rows], [row[7] for row in rows]
            done = self.run(self.queries["ack_many"], _leases.batch(self.engine_name, ids, tokens))
            assert len(done) == len(rows), "raw ack_many lost a lease"
        return len(rows)

    def close(self) -> None:
        self.conn.close()


def constant(op: Op) -> OpFactory:
    """The same op for every worker thread."""
    return lambda _: op


# -- the measurements --------------------------------------------------------------------


class QueueBench:
    def __init__(self, backend: Backend, settings: Settings) -> None:
        self.backend = backend
        self.settings = settings
        self.engine = backend.name
        self.runner = Runner(1)

    def close(self) -> None:
        self.runner.close()

    def store(self, namespace: str) -> alkstore.Store:
        store = self.backend.connect(namespace)
        store.migrate()
        return store

    def compare_ops(self, op_a: Op, op_b: Op) -> tuple[list[float], list[float]]:
        """Rates of two ops (1 thread), alternating slices, per repetition."""
        settings = self.settings
        for op in (op_a, op_b):
            self.runner.run(constant(op), 1, max(0.2, 0.15 * settings.seconds))
        reps = [
            interleave(
                lambda seconds: self.runner.run(constant(op_a), 1, seconds),
                lambda seconds: self.runner.run(constant(op_b), 1, seconds),
                settings.seconds,
                settings.slices,
            )
            for _ in range(settings.reps)
        ]
        return [a for a, _ in reps], [b for _, b in reps]

    # 1. single enqueue -------------------------------------------------------------------

    def enqueue_single(self) -> Metric:
        with self.store("bq_enqueue") as store:
            queue = store.queue("single")
            raw = RawSql(self.backend, store.namespace)
            try:
                encoded = _encode(PAYLOAD).decode()
                self.check_same_row(store, queue, raw, encoded)

                def ours() -> None:
                    queue.enqueue(PAYLOAD)

                def theirs() -> None:
                    raw.enqueue("single", encoded)

                a, b = self.compare_ops(ours, theirs)
            finally:
                raw.close()
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        return Metric(
            self.engine,
            "enqueue 1/tx: q.enqueue / raw INSERT",
            "x",
            ratios,
            SINGLE_TARGET,
            detail=f"q.enqueue {median(a):,.0f} jobs/s, raw {median(b):,.0f} jobs/s",
        )

    def enqueue_in_tx(self) -> Metric:
        """store.transaction() + tx.enqueue vs the same row in a hand-written transaction."""
        with self.store("bq_enqueue_tx") as store:
            raw = RawSql(self.backend, store.namespace)
            try:
                encoded = _encode(PAYLOAD).decode()

                def in_tx(queue: str, payload: object) -> None:
                    with store.transaction() as tx:
                        tx.enqueue(queue, payload)

                self.check_same_row(store, store.queue("tx"), raw, encoded, enqueue=in_tx)

                def ours() -> None:
                    with store.transaction() as tx:
                        tx.enqueue("tx", PAYLOAD)

                def theirs() -> None:
                    raw.enqueue_in_tx("tx", encoded)

                a, b = self.compare_ops(ours, theirs)
            finally:
                raw.close()
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        return Metric(
            self.engine,
            "enqueue in tx: tx.enqueue / raw tx",
            "x",
            ratios,
            TX_TARGET,
            detail=f"tx.enqueue {median(a):,.0f} jobs/s, raw {median(b):,.0f} jobs/s",
        )

    def check_same_row(
        self,
        store: alkstore.Store,
        queue: alkstore.Queue,
        raw: RawSql,
        encoded: str,
        enqueue: Callable[[str, object], object] | None = None,
    ) -> None:
        """The raw INSERT must store the row alkstore stores (ids and times aside)."""
        if enqueue is None:
            queue.enqueue(PAYLOAD)
        else:
            enqueue(queue.name, PAYLOAD)
        raw.enqueue(queue.name, encoded)
        jobs = self.backend.table(store.namespace, "jobs")
        cast = "" if self.engine == "sqlite" else "::text"
        query = (
            "SELECT queue, priority, visible_at = enqueued_at, expires_at, attempts, max_attempts, "
            f"backoff{cast}, lease_token, dedupe_key, type, key, position, headers{cast}, "
            f"payload{cast}, history{cast} FROM {jobs} ORDER BY id DESC LIMIT 2"
        )
        with store.transaction() as tx:
            ours, theirs = (tuple(row) for row in tx.connection.execute(query).fetchall())
        if ours != theirs:
            raise RuntimeError(f"raw INSERT differs from q.enqueue's row: {ours} vs {theirs}")
        clear_jobs(self.backend, store)

    # 2. batched enqueue ------------------------------------------------------------------

    def enqueue_batched(self) -> Metric:
        with self.store("bq_batch") as store:
            queue = store.queue("batch")
            raw = RawSql(self.backend, store.namespace)
            try:
                payloads = [{**PAYLOAD, "order_id": i} for i in range(ENQUEUE_BATCH)]
                encoded = [_encode(p).decode() for p in payloads]

                def ours() -> None:
                    queue.enqueue_many(payloads)

                def theirs() -> None:
                    raw.enqueue_many("batch", encoded)

                a, b = self.compare_ops(ours, theirs)
            finally:
                raw.close()
        a = [x * ENQUEUE_BATCH for x in a]
        b = [x * ENQUEUE_BATCH for x in b]
        ratio = median([x / y for x, y in zip(a, b, strict=True)])
        return Metric(
            self.engine,
            f"enqueue_many({ENQUEUE_BATCH})",
            "jobs/s",
            a,
            detail=f"raw executemany {median(b):,.0f} jobs/s (ratio {ratio:.2f})",
        )

    # 2b. bulk enqueue -------------------------------------------------------------------

    def enqueue_bulk(self) -> list[Metric]:
        n = self.settings.bulk
        raw_name = "raw executemany" if self.engine == "sqlite" else "raw COPY"
        payloads = [{**PAYLOAD, "order_id": i} for i in range(n)]
        encoded = [_encode(p).decode() for p in payloads]
        samples: dict[str, list[float]] = {}
        with self.store("bq_bulk") as store:
            queue = store.queue("bulk")
            jobs = self.backend.table(store.namespace, "jobs")
            raw = RawSql(self.backend, store.namespace)

            def specs(rnd: int) -> list[Any]:
                return [
                    alkstore.JobSpec(p, delay=i % 7, priority=i % 3, dedupe_key=f"{rnd}-{i}",
                                     max_attempts=3)
                    for i, p in enumerate(payloads)
                ]  # fmt: skip

            def rows(rnd: int, options: bool) -> list[tuple[Any, ...]]:
                now = now_ms()
                if not options:
                    return [
                        ("bulk", 0, now, now, None, 5, None, None, None, None, None, None, p)
                        for p in encoded
                    ]
                return [
                    ("bulk", i % 3, now + (i % 7) * 1000, now, None, 3, None, f"{rnd}-{i}",
                     None, None, None, None, p)
                    for i, p in enumerate(encoded)
                ]  # fmt: skip

            def timed(name: str, run: Callable[[], object]) -> None:
                clear_jobs(self.backend, store)
                start = time.perf_counter()
                run()
                samples.setdefault(name, []).append(n / (time.perf_counter() - start))

            variants: list[tuple[str, Callable[[int], Callable[[], object]]]] = [
                ("ours", lambda rnd: lambda: queue.enqueue_many(payloads)),
                ("raw", lambda rnd: lambda: raw.bulk(jobs, rows(rnd, False))),
                ("ours_specs", lambda rnd: (lambda items: lambda: queue.enqueue_many(items))(
                    specs(rnd))),
                ("raw_specs", lambda rnd: lambda: raw.bulk(jobs, rows(rnd, True))),
            ]  # fmt: skip
            try:
                for name, make in variants:  # warm up: caches, prepared statements, the file
                    timed(name, make(-1))
                samples.clear()
                for rnd in range(max(3, self.settings.reps)):
                    for name, make in variants if rnd % 2 == 0 else variants[::-1]:
                        timed(name, make(rnd))
            finally:
                raw.close()
                clear_jobs(self.backend, store)

        def ratios(a: str, b: str) -> list[float]:
            return [x / y for x, y in zip(samples[a], samples[b], strict=True)]

        def rate(name: str) -> str:
            return f"{median(samples[name]):,.0f} jobs/s"

        return [
            Metric(
                self.engine,
                f"enqueue_many({n:,}) / {raw_name} of the same rows",
                "x",
                ratios("ours", "raw"),
                BULK_TARGET,
                detail=f"enqueue_many {rate('ours')}, {raw_name} {rate('raw')}",
            ),
            Metric(
                self.engine,
                f"enqueue_many({n:,} JobSpec) / {raw_name} of the same rows",
                "x",
                ratios("ours_specs", "raw_specs"),
                BULK_TARGET,
                detail=(
                    f"JobSpec(delay, priority, dedupe_key, max_attempts): {rate('ours_specs')}, "
                    f"{raw_name} {rate('raw_specs')}"
                ),
            ),
            self.append_bulk(raw_name),
            Metric(
                self.engine,
                f"enqueue_many({n:,}): JobSpec batch / plain batch",
                "x",
                ratios("ours_specs", "ours"),
                detail=f"the raw insert's own ratio {median(ratios('raw_specs', 'raw')):.2f}",
            ),
        ]

    def append_bulk(self, raw_name: str) -> Metric:
        """`tx.append_many(n events)` against the raw bulk insert of the same event rows."""
        n = self.settings.bulk
        events = [order_event(i) for i in range(n)]
        rows = [(e.__struct_config__.tag, None, None, _encode(e).decode()) for e in events]
        samples: dict[str, list[float]] = {"ours": [], "raw": []}
        with self.store("bq_bulk_log") as store:
            table = self.backend.table(store.namespace, "events")
            raw = RawSql(self.backend, store.namespace)

            def ours() -> None:
                with store.transaction() as tx:
                    tx.append_many(events)

            def theirs() -> None:
                raw.bulk_events(table, rows)

            def timed(name: str, run: Callable[[], None]) -> None:
                with store.transaction() as tx:
                    tx.connection.execute(f"DELETE FROM {table}")
                start = time.perf_counter()
                run()
                samples[name].append(n / (time.perf_counter() - start))

            try:
                timed("ours", ours)
                timed("raw", theirs)
                samples = {"ours": [], "raw": []}
                for rnd in range(max(3, self.settings.reps)):
                    order = [("ours", ours), ("raw", theirs)]
                    for name, run in order if rnd % 2 == 0 else order[::-1]:
                        timed(name, run)
            finally:
                raw.close()
        ours_rate, raw_rate = median(samples["ours"]), median(samples["raw"])
        return Metric(
            self.engine,
            f"tx.append_many({n:,}) / {raw_name} of the same event rows",
            "x",
            [x / y for x, y in zip(samples["ours"], samples["raw"], strict=True)],
            BULK_TARGET,
            detail=f"append_many {ours_rate:,.0f} events/s, {raw_name} {raw_rate:,.0f}",
        )

    # 3. drain ----------------------------------------------------------------------------

    def drain_all(self) -> list[Metric]:
        settings = self.settings
        with self.store("bq_drain") as store:
            queue = store.queue("drain")
            queue.config()  # cached from now on, as in a worker
            raw = RawSql(self.backend, store.namespace)
            samples: dict[tuple[int, str], list[tuple[int, float]]] = {}
            try:

                def ours(n: int) -> int:
                    jobs = queue.claim_many(n)
                    if jobs:
                        lost = queue.ack_many(jobs)
                        assert not lost, "ack_many lost leases"
                    return len(jobs)

                def theirs(n: int) -> int:
                    return raw.claim_ack("drain", n)

                variants: dict[str, Callable[[int], int]] = {"alkstore": ours, "raw": theirs}
                self.drain(store, ours, 10)  # warm up (and prepare the statements)
                self.drain(store, theirs, 10)
                for rep in range(settings.reps):
                    order = ["alkstore", "raw"] if rep % 2 == 0 else ["raw", "alkstore"]
                    for n in DRAIN_BATCHES:
                        for name in order:
                            result = self.drain(store, variants[name], n)
                            samples.setdefault((n, name), []).append(result)
            finally:
                raw.close()
        return [
            self.drain_metric(n, samples[(n, "alkstore")], samples[(n, "raw")])
            for n in DRAIN_BATCHES
        ]

    def drain(
        self, store: alkstore.Store, claim_ack: Callable[[int], int], n: int
    ) -> tuple[int, float]:
        """Fill `drain_jobs` jobs, then claim+ack them n at a time; (jobs done, seconds)."""
        settings = self.settings
        clear_jobs(self.backend, store)
        fill_jobs(self.backend, store, "drain", settings.drain_jobs)
        self.backend.vacuum(store.namespace, "jobs")
        done = 0
        start = time.perf_counter()
        deadline = start + settings.drain_cap
        while done < settings.drain_jobs and time.perf_counter() < deadline:
            got = claim_ack(n)
            if not got:
                break
            done += got
        return done, time.perf_counter() - start

    def drain_metric(
        self, n: int, ours: list[tuple[int, float]], raw: list[tuple[int, float]]
    ) -> Metric:
        rates = [jobs / seconds for jobs, seconds in ours]
        raw_rates = [jobs / seconds for jobs, seconds in raw]
        ratio = median([x / y for x, y in zip(rates, raw_rates, strict=True)])
        drained = min(jobs for jobs, _ in ours)
        scope = (
            f"{drained:,} jobs"
            if drained >= self.settings.drain_jobs
            else f"capped at {self.settings.drain_cap:g} s: >= {drained:,} jobs"
        )
        return Metric(
            self.engine,
            f"drain: claim_many({n}) + ack_many",
            "jobs/s",
            rates,
            DRAIN_TARGETS[self.engine] if n == 100 else None,
            detail=f"raw SQL {median(raw_rates):,.0f} jobs/s (ratio {ratio:.2f}); {scope}",
        )

    # 4. claim scaling --------------------------------------------------------------------

    def scaling(self) -> Metric:
        settings = self.settings
        small = self.store("bq_small")
        large = self.store("bq_large")
        try:
            start = time.perf_counter()
            fill_jobs(self.backend, large, "scale", settings.large)
            self.backend.vacuum(large.namespace, "jobs")
            fill_seconds = time.perf_counter() - start
            fill_jobs(self.backend, small, "scale", SMALL)
            self.backend.vacuum(small.namespace, "jobs")
            run_small = self.claims(small)
            run_large = self.claims(large)
            run_small(0.2)  # warm up
            run_large(0.2)
            reps = [
                interleave(run_large, run_small, settings.seconds, settings.slices)
                for _ in range(settings.reps)
            ]
        finally:
            small.close()
            large.close()
        at_large = [x for x, _ in reps]
        at_small = [y for _, y in reps]
        return Metric(
            self.engine,
            f"claim+ack x1 at {settings.large:,} / at {SMALL:,} waiting",
            "x",
            [x / y for x, y in reps],
            SCALE_TARGET,
            detail=(
                f"{median(at_large):,.0f} vs {median(at_small):,.0f} jobs/s "
                f"({settings.large:,} filled in {fill_seconds:.1f} s)"
            ),
        )

    def claims(self, store: alkstore.Store) -> Callable[[float], Tally]:
        """claim() + ack() for about `seconds`, topping the queue up every 100 claims
        outside the timed part (so the number of waiting jobs stays about the same)."""
        queue = store.queue("scale")
        queue.config()

        def run(seconds: float) -> Tally:
            done, timed = 0, 0.0
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                start = time.perf_counter()
                for _ in range(10):
                    job = queue.claim()
                    assert job is not None, "the queue ran dry"
                    job.ack()
                timed += time.perf_counter() - start
                done += 10
                if done % TOP_UP_EVERY == 0:
                    fill_jobs(self.backend, store, "scale", TOP_UP_EVERY)
            if done % TOP_UP_EVERY:
                fill_jobs(self.backend, store, "scale", done % TOP_UP_EVERY)
            return Tally(done, timed)

        return run


# -- driver ------------------------------------------------------------------------------


def run_engine(engine: str, settings: Settings) -> list[Metric]:
    backend = make_backend(engine)
    bench = QueueBench(backend, settings)
    results: list[Metric] = []
    try:
        if settings.only == "bulk":
            for metric in bench.enqueue_bulk():
                results.append(metric)
                progress(metric)
            return results
        for measure in (bench.enqueue_single, bench.enqueue_in_tx, bench.enqueue_batched):
            results.append(measure())
            progress(results[-1])
        for metric in bench.enqueue_bulk():
            results.append(metric)
            progress(metric)
        if settings.enqueue_only:
            return results
        for metric in bench.drain_all():
            results.append(metric)
            progress(metric)
        results.append(bench.scaling())
        progress(results[-1])
    finally:
        bench.close()
        backend.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--seconds", type=float, help="per timed measurement (2, quick 0.5)")
    parser.add_argument("--drain-jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--drain-cap", type=float, help="max seconds per drain (2.5, quick 1)")
    parser.add_argument("--large", type=int, default=1_000_000, help="jobs in the big queue")
    parser.add_argument("--enqueue-only", action="store_true", help="only the enqueue rows")
    parser.add_argument("--bulk", type=int, help="jobs per bulk enqueue (50000, quick 10000)")
    parser.add_argument("--only", choices=["bulk"], help="run only this measurement")
    args = parser.parse_args(argv)
    settings = Settings(
        engines=args.engines,
        reps=args.reps or (1 if args.quick else 3),
        seconds=args.seconds or (0.5 if args.quick else 2.0),
        drain_jobs=args.drain_jobs,
        drain_cap=args.drain_cap or (1.0 if args.quick else 2.5),
        large=args.large,
        enqueue_only=args.enqueue_only,
        bulk=args.bulk or (10_000 if args.quick else 50_000),
        only=args.only,
    )
    run = Run("queues", {**asdict(settings), "engines": ",".join(settings.engines)})
    run.announce()
    results = [m for engine in settings.engines for m in run_engine(engine, settings)]
    run.report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
