"""Shared helpers of the benchmarks: backends, timing, alternating comparisons, the report.

A backend is one throwaway database (a temp-dir SQLite file, or a fresh PostgreSQL
database dropped WITH (FORCE) at the end) plus the few bits of engine-specific
SQL a benchmark needs beyond alkstore itself (an application table, a raw INSERT
into the event table, a caller-owned connection).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

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
        with ExitStack() as stack:  # hold N pooled connections at once so the pool grows
            for _ in range(connections):
                stack.enter_context(store.transaction())

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


def make_backend(engine: str) -> Backend:
    if engine == "sqlite":
        return SqliteBackend()
    if engine == "postgres":
        return PostgresBackend()
    raise ValueError(f"unknown engine {engine!r}")


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
