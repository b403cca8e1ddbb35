"""SQLite: how a process's threads wait for the write lock, on the transactional-ack drain
(issue 17, item 4; docs/performance.md, docs/adr/0001 addendum 2026-12-01b).

Run it from the repository root (about two minutes; `--quick` takes a few seconds):

    python bench/sqlite_write_wait.py [--quick] [--reps 8] [--jobs 5000]
                                      [--concurrency 8] [--json results.json]

The drain of bench/tx_ack.py (one `relay.Worker` in this process, a handler that writes
one row, plain ack or `job.transaction()`), with four ways for the threads of this
process to wait for SQLite's write lock, switched drain by drain in one process (the
variants in a new random order each repetition, plain and tx ack alternating):

- busy: no process-local lock (alkstore before it): every BEGIN IMMEDIATE polls the
  busy handler, 0.2-1 ms apart (ADR 0001).
- quick: the same, the busy handler's first 50 tries 10-50 us apart instead.
- lock: alkstore's process-local lock (`alkstore/sqlite/_write.py`, a `threading.Lock`
  from BEGIN IMMEDIATE to COMMIT of each store transaction, the handlers' here; the
  claim loop's and the ack batcher's one-statement transactions do not take it):
  waiters block on it, one is woken as it is released (a thread arriving then may take
  it first).
- fifo: a process-local queue in its place: the lock is handed to the waiters in the
  order they came.

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


from alkstore.sqlite import _busy
from bench import tx_ack
from bench._common import Metric, Run, base_parser, make_backend, progress

VARIANTS = ("busy", "quick", "lock", "fifo")
QUICK = (0.00001, 0.00005)


class NoTurn:
    """No process-local lock: every writer goes straight to BEGIN IMMEDIATE (before)."""

    def acquire(self) -> None:
        pass

    def release(self) -> None:
        pass


class Fifo:
    """Waiters get the lock in the order they came: `release` hands it to the first."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[threading.Lock] = deque()

    def acquire(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if not waiter.acquire(timeout=30):
            raise RuntimeError("a writer waited 30 s for its turn")

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._held = False


class Waiting:
    """The current variant: the engine's write lock swapped, the busy handler counted."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.shipped = engine.write_lock
        self.polls = 0
        self._call = _busy.BusyWait.__call__
        self._quick = _busy.QUICK_SLEEP

    def use(self, variant: str) -> None:
        locks = {"busy": NoTurn, "quick": NoTurn, "fifo": Fifo}
        self.engine.write_lock = locks[variant]() if variant in locks else self.shipped
        _busy.QUICK_SLEEP = QUICK if variant == "quick" else self._quick

    @contextmanager
    def installed(self) -> Iterator[None]:
        waiting = self

        def call(handler: _busy.BusyWait, tries: int) -> bool:
            waiting.polls += 1
            return waiting._call(handler, tries)

        _busy.BusyWait.__call__ = call  # type: ignore[method-assign]
        try:
            yield
        finally:
            _busy.BusyWait.__call__ = self._call  # type: ignore[method-assign]
            _busy.QUICK_SLEEP = self._quick
            self.engine.write_lock = self.shipped


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
    backend = make_backend("sqlite")
    try:
        with backend.connect("bench_write_wait") as store:
            store.migrate()
            backend.create_orders(store)
            tx_ack.drain(backend, store, settings, tx_ack=True)  # warm-up
            waiting = Waiting(store.engine)
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
