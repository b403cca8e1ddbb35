"""SQLite: how a process's threads wait for the write lock, on the transactional-ack drain
(issue 17, item 4; docs/performance.md, docs/adr/0001 addendum 2026-12-01b).

Run it from the repository root (about two minutes; `--quick` takes a few seconds):

    python bench/sqlite_write_wait.py [--quick] [--reps 8] [--jobs 5000]
                                      [--concurrency 8] [--json results.json]

The drain of bench/tx_ack.py (one `relay.Worker` in this process, a handler that writes
one row, plain ack or `job.transaction()`), with four ways for the threads of this
process to wait for SQLite's write lock, switched drain by drain in one process (the
variants in a new random order each repetition, plain and tx ack alternating):

- busy: as shipped: every BEGIN IMMEDIATE polls the busy handler, 0.2-1 ms apart
  (ADR 0001).
- quick: the same, the busy handler's first 50 tries 10-50 us apart instead.
- lock: a process-local `threading.Lock` from BEGIN IMMEDIATE to COMMIT of every write
  transaction of the store's connections (the handlers', the claim loop's, the ack
  batcher's): waiters block on it, one is woken as it is released (a thread arriving
  then may take it first); WAL checkpoints run after it is released, as SQLite runs its
  automatic one after its own write lock is (not inside it).
- fifo: the same with a queue in place of the lock: it is handed to the waiters in the
  order they came.

The variants are patches of this process (`_busy.execute`: BEGIN IMMEDIATE takes the
lock, COMMIT gives it back; a rollback, which none of these drains has, would keep it);
alkstore itself has no process lock: measured, it did not raise the transactional ack's
throughput (docs/adr/0001, addendum 2026-12-01b; docs/performance.md).

Reported per variant: tx / plain ack (target >= 0.8x), the same per CPU second of this
process, busy-handler calls per 1000 jobs, and plain and tx ack throughput against
busy's in the same repetition. Every drain checks that each job was handled and acked.
The script always exits 0.
"""

from __future__ import annotations

import random
import sys
import threading
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script


import apsw

from alkstore.sqlite import _busy
from alkstore.sqlite import _seam as _sqlite
from bench import tx_ack
from bench._common import Metric, Run, base_parser, make_backend, progress

VARIANTS = ("busy", "quick", "lock", "fifo")
QUICK = (0.00001, 0.00005)
CHECKPOINT_PAGES = 1000  # SQLite's default wal_autocheckpoint


class Fifo:
    """Waiters get the lock in the order they came: `release` hands it to the first."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[threading.Lock] = deque()

    def acquire(self, timeout: float) -> bool:
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        return waiter.acquire(timeout=timeout)  # a bench: a timeout ends the run anyway

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._held = False


class Waiting:
    """The current variant, and the patches that carry it out: `_busy.execute` (BEGIN
    IMMEDIATE takes the process lock, COMMIT gives it back, then the checkpoint that
    the WAL hook noted), `BusyWait.__call__` (counted) and the engine's `configure`
    (the WAL hook)."""

    def __init__(self) -> None:
        self.lock: Any = None
        self.polls = 0
        self._due = threading.local()
        self._execute = _busy.execute
        self._call = _busy.BusyWait.__call__
        self._configure = _sqlite.configure
        self._quick = _busy.QUICK_SLEEP

    def use(self, variant: str) -> None:
        self.lock = Fifo() if variant == "fifo" else threading.Lock() if variant == "lock" else None
        _busy.QUICK_SLEEP = QUICK if variant == "quick" else self._quick

    @contextmanager
    def installed(self) -> Iterator[None]:
        waiting = self

        def execute(conn: apsw.Connection, statement: str) -> None:
            lock = waiting.lock
            if lock is not None and statement == "BEGIN IMMEDIATE":
                if not lock.acquire(timeout=30):
                    raise RuntimeError("a writer waited 30 s for the process lock")
                try:
                    waiting._execute(conn, statement)
                except BaseException:
                    lock.release()
                    raise
                return
            try:
                waiting._execute(conn, statement)
            finally:
                if lock is not None and statement == "COMMIT":
                    lock.release()
            if statement == "COMMIT" and getattr(waiting._due, "conn", None) is conn:
                waiting._due.conn = None
                try:  # after the lock, as SQLite's automatic one (whose errors it ignores)
                    conn.wal_checkpoint()
                except apsw.BusyError:
                    pass

        def call(handler: _busy.BusyWait, tries: int) -> bool:
            waiting.polls += 1
            return waiting._call(handler, tries)

        def wal_hook(conn: apsw.Connection, name: str, pages: int) -> int:
            if pages >= CHECKPOINT_PAGES:
                waiting._due.conn = conn
            return int(apsw.SQLITE_OK)

        def configure(conn: apsw.Connection, gate: _busy.Gate | None = None) -> None:
            waiting._configure(conn, gate)
            conn.set_wal_hook(wal_hook)

        _busy.execute = execute
        _busy.BusyWait.__call__ = call  # type: ignore[method-assign,assignment]
        _sqlite.configure = configure
        try:
            yield
        finally:
            _busy.execute = self._execute
            _busy.BusyWait.__call__ = self._call  # type: ignore[method-assign]
            _sqlite.configure = self._configure
            _busy.QUICK_SLEEP = self._quick


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--jobs", type=int, help="jobs per drain (5000, quick 1000)")
    parser.add_argument("--concurrency", type=int, default=8, help="handler concurrency")
    args = parser.parse_args(argv)
    settings = tx_ack.Settings(
        engines=("sqlite",),
        reps=args.reps or (1 if args.quick else 8),
        jobs=args.jobs or (1_000 if args.quick else 5_000),
        concurrency=args.concurrency,
    )
    run = Run(
        "sqlite_write_wait",
        {"reps": settings.reps, "jobs": settings.jobs, "concurrency": settings.concurrency},
    )
    run.announce()
    # (variant, tx ack?) -> per repetition: (jobs/s, jobs per CPU second, polls per job)
    found: dict[tuple[str, bool], list[tuple[float, float, float]]] = defaultdict(list)
    waiting = Waiting()
    backend = make_backend("sqlite")
    try:
        with backend.connect("bench_write_wait") as store:
            store.migrate()
            backend.create_orders(store)
            tx_ack.drain(backend, store, settings, tx_ack=True)  # warm-up
            with waiting.installed():
                for rep in range(settings.reps):
                    for variant in random.sample(VARIANTS, len(VARIANTS)):
                        waiting.use(variant)
                        for tx in (True, False) if rep % 2 else (False, True):
                            waiting.polls = 0
                            wall, cpu = tx_ack.drain(backend, store, settings, tx)
                            found[variant, tx].append((wall, cpu, waiting.polls / settings.jobs))
    finally:
        backend.close()
    results = [m for variant in VARIANTS for m in metrics(variant, found, settings)]
    for row in results:
        progress(row)
    run.report(results, args.json)
    return 0


def metrics(
    variant: str, found: dict[tuple[str, bool], list[tuple[float, float, float]]], settings: Any
) -> list[Metric]:
    plain, txack = found[variant, False], found[variant, True]
    base_plain, base_tx = found["busy", False], found["busy", True]
    detail = f"{settings.jobs:,} jobs, concurrency {settings.concurrency}"

    def ratio(
        a: list[tuple[float, float, float]], b: list[tuple[float, float, float]], i: int
    ) -> list[float]:
        return [x[i] / y[i] for x, y in zip(a, b, strict=True)]

    rows = [
        Metric(
            "sqlite",
            f"{variant}: tx ack / plain ack",
            "x",
            ratio(txack, plain, 0),
            0.8,
            detail=f"medians {median(t[0] for t in txack):,.0f} / "
            f"{median(p[0] for p in plain):,.0f} jobs/s, {detail}",
        ),
        Metric("sqlite", f"{variant}: tx / plain, per CPU second", "x", ratio(txack, plain, 1)),
        Metric(
            "sqlite",
            f"{variant}: busy-handler calls per 1000 jobs, tx ack",
            "calls",
            [1000 * t[2] for t in txack],
            better="lower",
            detail=f"plain ack {1000 * median(p[2] for p in plain):,.0f}",
        ),
    ]
    if variant != "busy":
        rows += [
            Metric(
                "sqlite", f"{variant} / busy: plain ack jobs/s", "x", ratio(plain, base_plain, 0)
            ),
            Metric("sqlite", f"{variant} / busy: tx ack jobs/s", "x", ratio(txack, base_tx, 0)),
        ]
    return rows


if __name__ == "__main__":
    sys.exit(main())
