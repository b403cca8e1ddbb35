"""Shared helpers of the benchmarks: backends, timing, alternating comparisons, the report.

A backend is one throwaway database (a temp-dir SQLite file, or a fresh PostgreSQL
database dropped WITH (FORCE) at the end) plus the few bits of engine-specific
SQL a benchmark needs beyond alkstore itself (an application table, a raw INSERT
into the event table, a caller-owned connection).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import apsw
import psycopg
from psycopg import sql

import alkstore

Op = Callable[[], None]
"""One unit of work (one transaction) as run by a worker thread."""

OpFactory = Callable[[int], Op]
"""Builds the op of worker `i` (so a worker can own a connection)."""

EventParams = tuple[str, str | None, str | None, str]
"""(type, key, headers, payload): the values alkstore binds into its event INSERT."""

POOL_SIZE = 10  # >= the most concurrent threads any benchmark uses
PG_ADMIN_URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://root@127.0.0.1:5432/test")


class OrderPlaced(alkstore.Event, tag="bench.order_placed"):
    order_id: int
    total_cents: int = 0


def order_values(order_id: int) -> tuple[int, str, int]:
    """The application row of one order: (id, customer, total)."""
    return (order_id, f"customer-{order_id % 100}", order_id % 10_000)


def order_event(order_id: int) -> OrderPlaced:
    return OrderPlaced(order_id=order_id, total_cents=order_id % 10_000)


# -- backends ----------------------------------------------------------------------------


class Backend(ABC):
    """One throwaway database on one engine."""

    name: str
    url: str

    def connect(self, namespace: str) -> alkstore.Store:
        return alkstore.connect(self.url, namespace=namespace, pool_size=POOL_SIZE)

    def prewarm(self, store: alkstore.Store, connections: int) -> None:  # noqa: B027
        """Open the store's connections up front (a no-op unless the engine pools)."""

    @abstractmethod
    def create_orders(self, store: alkstore.Store) -> None: ...

    @abstractmethod
    def insert_order(self, conn: Any, order_id: int) -> None: ...

    @abstractmethod
    def raw_event_insert(self, namespace: str) -> Callable[[Any, EventParams], None]:
        """A hand-written INSERT of an event row, as alkstore's `insert_event` query does it."""

    @abstractmethod
    def latest_events(self, conn: Any, namespace: str, count: int) -> list[tuple[Any, ...]]:
        """(type, key, headers, payload) of the newest event rows, as stored."""

    @abstractmethod
    def raw_connection(self) -> Any:
        """A connection the application owns (not from the store)."""

    @abstractmethod
    def raw_transaction(self, conn: Any) -> AbstractContextManager[object]:
        """A plain write transaction on a caller-owned connection."""

    @abstractmethod
    def close(self) -> None:
        """Remove the database."""

    @abstractmethod
    def table(self, namespace: str, name: str) -> str:
        """The qualified name of one of alkstore's tables (`jobs`, `events`, ...)."""

    @abstractmethod
    def autocommit_connection(self) -> Any:
        """A caller-owned connection on which every statement is its own transaction."""

    @abstractmethod
    def vacuum(self, namespace: str, name: str) -> None:
        """Tidy a table between measurements (PostgreSQL: VACUUM ANALYZE; SQLite: ANALYZE)."""


class SqliteBackend(Backend):
    name = "sqlite"
    ORDERS_DDL = (
        "CREATE TABLE bench_orders "
        "(id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total INTEGER NOT NULL)"
    )
    INSERT_ORDER = "INSERT INTO bench_orders (id, customer, total) VALUES (?, ?, ?)"

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="alkstore_bench_")
        self.path = os.path.join(self._dir, "bench.db")
        self.url = f"sqlite:///{self.path}"

    def create_orders(self, store: alkstore.Store) -> None:
        with store.transaction() as tx:
            tx.connection.execute(self.ORDERS_DDL)

    def insert_order(self, conn: Any, order_id: int) -> None:
        conn.execute(self.INSERT_ORDER, order_values(order_id))

    def raw_event_insert(self, namespace: str) -> Callable[[Any, EventParams], None]:
        query = (
            f"INSERT INTO {namespace}__events (type, key, headers, payload, appended_at) "
            "VALUES (?, ?, ?, ?, CAST(unixepoch('subsec') * 1000 AS INTEGER))"
        )

        def insert(conn: Any, params: EventParams) -> None:
            conn.execute(query, params)

        return insert

    def latest_events(self, conn: Any, namespace: str, count: int) -> list[tuple[Any, ...]]:
        query = (
            f"SELECT type, key, headers, payload FROM {namespace}__events "
            "ORDER BY position DESC LIMIT ?"
        )
        return [tuple(row) for row in conn.execute(query, (count,))]

    def raw_connection(self) -> Any:
        conn = apsw.Connection(self.path)
        conn.set_busy_timeout(5_000)
        conn.execute("PRAGMA synchronous = NORMAL")  # what alkstore's own connections use
        return conn

    @contextmanager
    def raw_transaction(self, conn: Any) -> Iterator[object]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def table(self, namespace: str, name: str) -> str:
        return f"{namespace}__{name}"

    def autocommit_connection(self) -> Any:
        return self.raw_connection()  # apsw: a statement outside BEGIN is its own transaction

    def vacuum(self, namespace: str, name: str) -> None:
        conn = self.raw_connection()
        try:
            conn.execute(f"ANALYZE {self.table(namespace, name)}")
        finally:
            conn.close()


class PostgresBackend(Backend):
    name = "postgres"
    ORDERS_DDL = (
        "CREATE TABLE bench_orders "
        "(id bigint PRIMARY KEY, customer text NOT NULL, total bigint NOT NULL)"
    )
    INSERT_ORDER = "INSERT INTO bench_orders (id, customer, total) VALUES (%s, %s, %s)"

    def __init__(self, admin_url: str = PG_ADMIN_URL) -> None:
        self._admin_url = admin_url
        self._dbname = f"alkstore_bench_{uuid.uuid4().hex[:10]}"
        self._admin(sql.SQL("CREATE DATABASE {}"))
        self.url = f"{admin_url.rpartition('/')[0]}/{self._dbname}"

    def _admin(self, statement: sql.SQL) -> None:
        with psycopg.connect(self._admin_url, autocommit=True) as admin:
            admin.execute(statement.format(sql.Identifier(self._dbname)))

    def prewarm(self, store: alkstore.Store, connections: int) -> None:
        """Hold N pooled connections at once so the pool grows: one store transaction
        per thread (a thread holds one at a time, docs/adr/0016)."""
        opened = threading.Barrier(connections)

        def hold() -> None:
            with store.transaction():
                opened.wait(60)

        threads = [threading.Thread(target=hold) for _ in range(connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def create_orders(self, store: alkstore.Store) -> None:
        with store.transaction() as tx:
            tx.connection.execute(self.ORDERS_DDL)

    def insert_order(self, conn: Any, order_id: int) -> None:
        conn.execute(self.INSERT_ORDER, order_values(order_id))

    def raw_event_insert(self, namespace: str) -> Callable[[Any, EventParams], None]:
        # namespaces are checked identifiers (alkstore formats its SQL the same way)
        query = (
            f"INSERT INTO {namespace}.events (type, key, headers, payload) "
            "VALUES (%s, %s, %s::jsonb, %s::jsonb)"
        )

        def insert(conn: Any, params: EventParams) -> None:
            conn.execute(query, params)

        return insert

    def latest_events(self, conn: Any, namespace: str, count: int) -> list[tuple[Any, ...]]:
        query = (
            f"SELECT type, key, headers::text, payload::text FROM {namespace}.events "
            "ORDER BY id DESC LIMIT %s"
        )
        return [tuple(row) for row in conn.execute(query, (count,))]

    def raw_connection(self) -> Any:
        return psycopg.connect(self.url)  # not autocommit: an application's usual setup

    def raw_transaction(self, conn: Any) -> AbstractContextManager[object]:
        transaction: AbstractContextManager[object] = conn.transaction()
        return transaction

    def close(self) -> None:
        self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)"))

    def table(self, namespace: str, name: str) -> str:
        return f"{namespace}.{name}"

    def autocommit_connection(self) -> Any:
        return psycopg.connect(self.url, autocommit=True)  # like alkstore's pooled connections

    def vacuum(self, namespace: str, name: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("VACUUM ANALYZE {}.{}").format(
                    sql.Identifier(namespace), sql.Identifier(name)
                )
            )


def make_backend(engine: str) -> Backend:
    if engine == "sqlite":
        return SqliteBackend()
    if engine == "postgres":
        return PostgresBackend()
    raise ValueError(f"unknown engine {engine!r}")


def now_ms() -> int:
    return int(time.time() * 1000)


def fill_jobs(backend: Backend, store: alkstore.Store, queue: str, count: int) -> None:
    """Insert `count` visible no-op jobs with one SQL statement (fast, valid columns)."""
    jobs = backend.table(store.namespace, "jobs")
    now = now_ms() - 1_000
    if backend.name == "postgres":
        query = (
            f"INSERT INTO {jobs} (queue, priority, visible_at, enqueued_at, max_attempts, payload) "
            "SELECT %s, 0, %s, %s, 5, jsonb_build_object('n', g) FROM generate_series(1, %s) AS g"
        )
    else:
        query = (
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
            f"INSERT INTO {jobs} (queue, priority, visible_at, enqueued_at, max_attempts, payload) "
            "SELECT ?, 0, ?, ?, 5, json_object('n', i) FROM c"
        )
    params = (queue, now, now, count) if backend.name == "postgres" else (count, queue, now, now)
    with store.transaction() as tx:
        tx.connection.execute(query, params)


def fill_log(backend: Backend, store: alkstore.Store, count: int) -> None:
    """Append `count` committed, numbered `bench.order_placed` events with one set-based
    INSERT (rows as `append_many` stores them), after the current head. Nothing else
    may append or sequence meanwhile (PostgreSQL: the rows get their positions here)."""
    events = backend.table(store.namespace, "events")
    if backend.name == "postgres":
        head = backend.table(store.namespace, "log_head")
        statements: list[tuple[str, tuple[Any, ...]]] = [
            (
                f"INSERT INTO {events} (position, type, payload) "
                "SELECT h.head + g, 'bench.order_placed', jsonb_build_object("
                "'type', 'bench.order_placed', 'order_id', g, 'total_cents', g %% 10000) "
                f"FROM {head} AS h, generate_series(1, %s) AS g",
                (count,),
            ),
            (f"UPDATE {head} SET head = head + %s", (count,)),
        ]
    else:
        statements = [
            (
                "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
                f"INSERT INTO {events} (type, payload, appended_at) "
                "SELECT 'bench.order_placed', json_object("
                "'type', 'bench.order_placed', 'order_id', i, 'total_cents', i % 10000), ? "
                "FROM c",
                (count, now_ms()),
            )
        ]
    with store.transaction() as tx:
        for statement, params in statements:
            tx.connection.execute(statement, params)
    backend.vacuum(store.namespace, "events")


def clear_jobs(backend: Backend, store: alkstore.Store) -> None:
    jobs = backend.table(store.namespace, "jobs")
    statement = f"TRUNCATE {jobs}" if backend.name == "postgres" else f"DELETE FROM {jobs}"
    with store.transaction() as tx:
        tx.connection.execute(statement)


# -- timing ------------------------------------------------------------------------------


class Runner:
    """Runs ops in worker threads for a fixed time; threads (and so the store's
    per-thread SQLite connections) are reused from one measurement to the next."""

    def __init__(self, max_threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="bench")

    def run(self, make_op: OpFactory, threads: int, seconds: float) -> Tally:
        """Run `threads` workers flat out for `seconds`; count their operations."""
        ops = [make_op(i) for i in range(threads)]
        barrier = threading.Barrier(threads + 1, timeout=60)
        deadline = [0.0]

        def work(op: Op) -> tuple[int, float]:
            barrier.wait()
            end, done = deadline[0], 0
            while time.perf_counter() < end:
                op()
                done += 1
            return done, time.perf_counter()

        futures = [self._pool.submit(work, op) for op in ops]
        start = time.perf_counter()
        deadline[0] = start + seconds
        barrier.wait()
        results = [future.result() for future in futures]
        finished = max(at for _, at in results)
        return Tally(sum(done for done, _ in results), finished - start)

    def close(self) -> None:
        self._pool.shutdown()


@dataclass
class Tally:
    """Operations done in some seconds; adds up over slices."""

    ops: int = 0
    seconds: float = 0.0

    def __iadd__(self, other: Tally) -> Tally:
        self.ops += other.ops
        self.seconds += other.seconds
        return self

    @property
    def rate(self) -> float:
        return self.ops / self.seconds


def interleave(
    run_a: Callable[[float], Tally], run_b: Callable[[float], Tally], seconds: float, slices: int
) -> tuple[float, float]:
    """One repetition: A and B each run `seconds` in `slices` slices, alternating A B B A A B ...

    Short alternating slices make a burst of outside load hit both variants alike.
    """
    a, b = Tally(), Tally()
    step = seconds / slices
    for i in range(slices):
        if i % 2 == 0:
            a += run_a(step)
            b += run_b(step)
        else:
            b += run_b(step)
            a += run_a(step)
    return a.rate, b.rate


def alternate(
    measure_a: Callable[[], float], measure_b: Callable[[], float], reps: int
) -> tuple[list[float], list[float]]:
    """Measure A and B `reps` times each, alternating (AB, BA, AB, ...) to spread drift."""
    a: list[float] = []
    b: list[float] = []
    for rep in range(reps):
        if rep % 2 == 0:
            a.append(measure_a())
            b.append(measure_b())
        else:
            b.append(measure_b())
            a.append(measure_a())
    return a, b


# -- results and the report --------------------------------------------------------------


@dataclass
class Comparison:
    """Throughput of variant A against variant B, measured alternately in one run."""

    engine: str
    name: str
    conns: int
    unit: str
    a_label: str
    b_label: str
    a: list[float]
    b: list[float]
    target: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def a_median(self) -> float:
        return statistics.median(self.a)

    @property
    def b_median(self) -> float:
        return statistics.median(self.b)

    @property
    def ratios(self) -> list[float]:
        return [x / y for x, y in zip(self.a, self.b, strict=True)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def status(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if self.ratio >= self.target else "FAIL"

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "name": self.name,
            "conns": self.conns,
            "unit": self.unit,
            "a": {"label": self.a_label, "samples": self.a, "median": self.a_median},
            "b": {"label": self.b_label, "samples": self.b, "median": self.b_median},
            "ratios": self.ratios,
            "ratio_median": self.ratio,
            "target": self.target,
            "status": self.status,
            "notes": self.notes,
        }


_COLUMNS = (
    ("engine", "<8"),
    ("measurement: A / B", "<55"),
    ("conns", ">5"),
    ("A median", ">16"),
    ("B median", ">16"),
    ("A/B", ">6"),
    ("A/B range", ">11"),
    ("target", ">7"),
    ("result", ">6"),
)


def _row(cells: tuple[str, ...]) -> str:
    return "  ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(cells, _COLUMNS, strict=True))


def _rate(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}"


def _cells(c: Comparison) -> tuple[str, ...]:
    ratios = c.ratios
    return (
        c.engine,
        f"{c.name}: {c.a_label} / {c.b_label}",
        str(c.conns),
        _rate(c.a_median, c.unit),
        _rate(c.b_median, c.unit),
        f"{c.ratio:.3f}",
        f"{min(ratios):.2f}-{max(ratios):.2f}",
        "-" if c.target is None else f">={c.target:.2f}",
        c.status,
    )


def render_table(results: list[Comparison]) -> str:
    header = _row(tuple(name for name, _ in _COLUMNS))
    lines = [header, "-" * len(header)]
    lines.extend(_row(_cells(c)) for c in results)
    notes = [f"  {c.engine}: {note}" for c in results for note in c.notes]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


# -- metrics with targets (queues, relay, worker benchmarks) -----------------------------

REPO = Path(__file__).resolve().parents[1]
ENGINES = ("sqlite", "postgres")


@dataclass
class Metric:
    """One figure measured in several repetitions, optionally held to a target.

    `better` says which way the target goes: "higher" (throughputs, ratios) or "lower"
    (latencies). `detail` is context printed beside the median (the baseline, counts).
    """

    engine: str
    name: str
    unit: str
    samples: list[float]
    target: float | None = None
    better: Literal["higher", "lower"] = "higher"
    detail: str = ""
    notes: list[str] = field(default_factory=list)
    load: float = field(default_factory=lambda: os.getloadavg()[0])

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def status(self) -> str:
        if self.target is None:
            return "info"
        ok = self.median >= self.target if self.better == "higher" else self.median <= self.target
        return "PASS" if ok else "FAIL"

    def fmt(self, value: float) -> str:
        return format_value(value, self.unit)

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return f"{'>=' if self.better == 'higher' else '<='} {self.fmt(self.target)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "name": self.name,
            "unit": self.unit,
            "samples": self.samples,
            "median": self.median,
            "target": self.target,
            "better": self.better,
            "status": self.status,
            "detail": self.detail,
            "notes": self.notes,
            "load_average": self.load,
        }


def format_number(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.3f}"
    if unit in ("ms", "s"):
        return f"{value:.2f}"
    return f"{value:,.0f}"


def format_value(value: float, unit: str) -> str:
    number = format_number(value, unit)
    return f"{number}x" if unit == "x" else f"{number} {unit}"


_METRIC_COLUMNS = (
    ("engine", "<8"),
    ("measurement", "<44"),
    ("median", ">15"),
    ("range (reps)", ">23"),
    ("target", ">17"),
    ("result", ">6"),
    ("load", ">5"),
    ("detail", "<0"),
)


def _metric_row(cells: Sequence[str]) -> str:
    line = "  ".join(f"{c:{spec}}" for c, (_, spec) in zip(cells, _METRIC_COLUMNS, strict=True))
    return line.rstrip()


def render_metrics(rows: Sequence[Metric]) -> str:
    """The table: median of the repetitions, their range, target and PASS/FAIL/info."""
    header = _metric_row([name for name, _ in _METRIC_COLUMNS])
    lines = [header, "-" * len(header)]
    for m in rows:
        spread = ""
        if len(m.samples) > 1:
            low, high = (format_number(v, m.unit) for v in (min(m.samples), max(m.samples)))
            spread = f"{low}-{high}"
        cells = (
            m.engine,
            m.name,
            m.fmt(m.median),
            spread,
            m.target_text,
            m.status,
            f"{m.load:.1f}",
            m.detail,
        )
        lines.append(_metric_row(cells))
    notes = [f"  {m.engine}: {note}" for m in rows for note in m.notes]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


def percentile(values: Sequence[float], pct: float) -> float:
    """The pct-th percentile, interpolating between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * pct / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# -- the run: arguments, provenance, the report ------------------------------------------


def engines_arg(value: str) -> tuple[str, ...]:
    engines = tuple(e.strip() for e in value.split(",") if e.strip())
    unknown = set(engines) - set(ENGINES)
    if not engines or unknown:
        raise argparse.ArgumentTypeError(f"choose from {','.join(ENGINES)}")
    return engines


def base_parser(doc: str | None) -> argparse.ArgumentParser:
    """--quick, --engines, --reps, --json: what every benchmark script takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 rep, small sizes")
    parser.add_argument("--engines", type=engines_arg, default=ENGINES, help="sqlite,postgres")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, quick 1)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    return parser


def load_average() -> float:
    """The 1-minute load average (other work on the machine makes the numbers noisy)."""
    return os.getloadavg()[0]


def git_commit() -> str:
    """The library version measured: HEAD, plus the files changed since if any."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    changed = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "alkstore",
            "relay",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\n")
    dirty = sorted(line[3:] for line in changed if line.strip())
    if not head:
        return "unknown"
    return f"{head}+dirty({', '.join(dirty)})" if dirty else head


@dataclass
class Run:
    """A benchmark run: announces itself, then prints and saves the report."""

    title: str
    settings: dict[str, Any]
    commit: str = field(default_factory=git_commit)
    load_at_start: float = field(default_factory=load_average)
    started: float = field(default_factory=time.perf_counter)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def announce(self) -> None:
        shown = " ".join(f"{k}={v}" for k, v in self.settings.items())
        print(
            f"alkstore {self.title} benchmark at {self.commit}: {shown} "
            f"cpus={os.cpu_count()} load={self.load_at_start:.2f}",
            flush=True,
        )

    def report(self, rows: Sequence[Metric], json_path: Path | None) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"\n{render_metrics(rows)}\n", flush=True)
        reps = self.settings.get("reps")
        print(
            f"commit {self.commit}; total {elapsed:.0f} s; medians of {reps} reps; "
            f"load average {self.load_at_start:.2f} at start, {load_average():.2f} now "
            f"on {os.cpu_count()} cpus",
            flush=True,
        )
        if json_path is not None:
            meta = {
                "benchmark": self.title,
                "settings": self.settings,
                "commit": self.commit,
                "started": self.started_at,
                "elapsed_seconds": elapsed,
                "load_average_at_start": self.load_at_start,
                "load_average_at_end": load_average(),
                "python": sys.version,
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
            }
            document = {"meta": meta, "results": [m.to_json() for m in rows]}
            json_path.write_text(json.dumps(document, indent=2) + "\n", "utf-8")


def progress(metric: Metric) -> None:
    print(
        f"  [{metric.engine}] {metric.name}: {metric.fmt(metric.median)} "
        f"({metric.status}) {metric.detail}",
        file=sys.stderr,
        flush=True,
    )


# -- processes ---------------------------------------------------------------------------


@contextmanager
def cli_process(
    args: Sequence[str], log_path: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m relay.cli ARGS` from the repository root, its output in `log_path` (a
    file, never a pipe that could fill up); stopped with SIGTERM (SIGKILL after 10 s)."""
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "relay.cli", *args],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def tail_of(path: Path, lines: int = 20) -> str:
    """The end of a process log, for error messages."""
    try:
        return "\n".join(path.read_text("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def latency_metrics(
    engine: str,
    name: str,
    reps: Sequence[Sequence[float]],
    targets: tuple[float | None, float | None],
    detail: str = "",
    notes: Sequence[str] = (),
) -> list[Metric]:
    """p50 and p99 rows (ms) from latency samples in seconds, one list per repetition."""
    rows = []
    for pct, target in zip((50, 99), targets, strict=True):
        values = [percentile(rep, pct) * 1000 for rep in reps]
        rows.append(
            Metric(engine, f"{name} p{pct}", "ms", values, target, better="lower", detail=detail)
        )
    rows[-1].notes.extend(notes)
    return rows


def pace(start: float, index: int, interval: float) -> None:
    """Sleep until `start + index * interval` (perf_counter time); no-op if already late."""
    delay = start + index * interval - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
