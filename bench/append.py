"""Append benchmark: what an appended event costs a business transaction.

Run it from the repository root (about 3-4 minutes; `--quick` takes well under one):

    python bench/append.py [--quick] [--engines sqlite,postgres] [--seconds 2]
                           [--reps 5] [--log-events 100000] [--json results.json]

On each engine, in one run:

1. business tx: one INSERT into an application table (`bench_orders`) through
   `store.transaction()`, with vs without `tx.append(OrderPlaced(...))`, at 1 and 8
   concurrent connections (threads); then the same on a caller-owned connection,
   `alkstore.append(conn, ...)` vs the same raw transaction without it.
2. layer cost: the same transaction writing its event with `tx.append(event)` vs a
   hand-written INSERT of the identical row (payload pre-encoded).
3. log read: tail a log of 100,000 pre-appended events with `store.log.read(after,
   limit=1000)`, decoding every `.payload` vs not decoding.

In each of `--reps` repetitions, variants A and B each run for `--seconds`, in
alternating slices of about 0.25 s (A B B A A B ...), so that bursts of outside load
hit both alike; log reads alternate whole passes. The table shows median throughputs
and the median (and range) of the per-repetition ratios A/B. Targets are shown as
PASS/FAIL; the script always exits 0.

SQLite runs on a file in a temp directory; PostgreSQL on a throwaway database
`alkstore_bench_<random>` created through $ALKSTORE_BENCH_PG (default
postgresql://root@127.0.0.1:5432/test) and dropped WITH (FORCE) at the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/append.py`

import alkstore
from bench._common import (
    Backend,
    Comparison,
    EventParams,
    Op,
    OpFactory,
    OrderPlaced,
    Runner,
    alternate,
    interleave,
    make_backend,
    order_event,
    render_table,
)

REPO = Path(__file__).resolve().parents[1]
ENGINES = ("sqlite", "postgres")
PG_BUSINESS_TARGET = 0.85  # with/without append, store.transaction(), PostgreSQL
LAYER_TARGET = 0.9  # tx.append vs raw INSERT of the same row, both engines
READ_BATCH = 1_000
FILL_BATCH = 1_000
SLICE_SECONDS = 0.25


@dataclass(frozen=True)
class Settings:
    engines: tuple[str, ...]
    reps: int
    seconds: float
    warmup: float
    log_events: int
    threads: tuple[int, ...] = (1, 8)

    @property
    def slices(self) -> int:
        """Alternating slices per repetition: about 0.25 s each, at least 2."""
        return max(2, round(self.seconds / SLICE_SECONDS))


@dataclass(frozen=True)
class Variant:
    label: str
    make_op: OpFactory


# -- 1 and 2: transactions ---------------------------------------------------------------


class EngineBench:
    """The transaction benchmarks of one engine, on one migrated store."""

    def __init__(
        self, backend: Backend, store: alkstore.Store, runner: Runner, settings: Settings
    ) -> None:
        self.backend = backend
        self.store = store
        self.runner = runner
        self.settings = settings
        self.ids = itertools.count(1)  # order ids, unique across every variant

    def run_all(self) -> list[Comparison]:
        results = [self.business_store(conns) for conns in self.settings.threads]
        results.append(self.business_caller_owned(conns=1))
        results.append(self.layer_cost())
        return results

    def compare(
        self, name: str, conns: int, a: Variant, b: Variant, target: float | None
    ) -> Comparison:
        settings = self.settings
        for variant in (a, b):
            self.runner.run(variant.make_op, conns, settings.warmup)
        reps = [
            interleave(
                lambda seconds: self.runner.run(a.make_op, conns, seconds),
                lambda seconds: self.runner.run(b.make_op, conns, seconds),
                settings.seconds,
                settings.slices,
            )
            for _ in range(settings.reps)
        ]
        samples_a, samples_b = [x for x, _ in reps], [y for _, y in reps]
        result = Comparison(
            self.backend.name, name, conns, "tx/s", a.label, b.label, samples_a, samples_b, target
        )
        progress(result)
        return result

    # 1. business transaction ------------------------------------------------------------

    def store_tx(self, append: bool) -> Op:
        store, backend, ids = self.store, self.backend, self.ids

        def op() -> None:
            order_id = next(ids)
            with store.transaction() as tx:
                backend.insert_order(tx.connection, order_id)
                if append:
                    tx.append(order_event(order_id))

        return op

    def business_store(self, conns: int) -> Comparison:
        target = PG_BUSINESS_TARGET if self.backend.name == "postgres" else None
        return self.compare(
            "business tx (store.transaction)",
            conns,
            Variant("append", lambda _: self.store_tx(append=True)),
            Variant("none", lambda _: self.store_tx(append=False)),
            target,
        )

    def caller_tx(self, conn: Any, append: bool) -> Op:
        backend, ids, namespace = self.backend, self.ids, self.store.namespace

        def op() -> None:
            order_id = next(ids)
            with backend.raw_transaction(conn):
                backend.insert_order(conn, order_id)
                if append:
                    alkstore.append(conn, order_event(order_id), namespace=namespace)

        return op

    def business_caller_owned(self, conns: int) -> Comparison:
        with caller_connections(self.backend) as connection:
            return self.compare(
                "business tx (caller-owned conn)",
                conns,
                Variant("alkstore.append", lambda i: self.caller_tx(connection(i), True)),
                Variant("none", lambda i: self.caller_tx(connection(i), False)),
                None,
            )

    # 2. layer cost ----------------------------------------------------------------------

    def layer_tx(self, write_event: Callable[[alkstore.Transaction], None]) -> Op:
        store, backend, ids = self.store, self.backend, self.ids

        def op() -> None:
            order_id = next(ids)
            with store.transaction() as tx:
                backend.insert_order(tx.connection, order_id)
                write_event(tx)

        return op

    def layer_cost(self) -> Comparison:
        event = order_event(123_456)
        params = event_params(event)
        raw = self.backend.raw_event_insert(self.store.namespace)
        self.check_same_row(event, params, raw)
        return self.compare(
            "layer (event in business tx)",
            1,
            Variant("tx.append", lambda _: self.layer_tx(lambda tx: tx.append(event))),
            Variant("raw INSERT", lambda _: self.layer_tx(lambda tx: raw(tx.connection, params))),
            LAYER_TARGET,
        )

    def check_same_row(
        self, event: OrderPlaced, params: EventParams, raw: Callable[[Any, EventParams], None]
    ) -> None:
        """The raw variant must store exactly the row alkstore stores."""
        with self.store.transaction() as tx:
            tx.append(event)
            raw(tx.connection, params)
            ours, theirs = self.backend.latest_events(tx.connection, self.store.namespace, 2)
        if ours != theirs:
            raise RuntimeError(f"raw INSERT differs from alkstore's row: {ours} vs {theirs}")


def event_params(event: OrderPlaced) -> EventParams:
    """What alkstore binds for an event with no key and no headers, encoded once."""
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return (tag, None, None, msgspec.json.encode(event).decode())


@contextmanager
def caller_connections(backend: Backend) -> Iterator[Callable[[int], Any]]:
    """Connections the application owns, one per worker index, closed at the end."""
    conns: dict[int, Any] = {}

    def connection(index: int) -> Any:
        if index not in conns:
            conns[index] = backend.raw_connection()
        return conns[index]

    try:
        yield connection
    finally:
        for conn in conns.values():
            conn.close()


# -- 3: log read -------------------------------------------------------------------------


def fill_log(store: alkstore.Store, count: int) -> float:
    """Append `count` events in batched transactions; returns events/s."""
    start = time.perf_counter()
    for first in range(0, count, FILL_BATCH):
        with store.transaction() as tx:
            tx.append_many(order_event(i) for i in range(first, min(first + FILL_BATCH, count)))
    return count / (time.perf_counter() - start)


def tail(store: alkstore.Store, head: int, decode: bool) -> float:
    """Read the log from position 0 to `head`; returns events/s."""
    after = seen = 0
    start = time.perf_counter()
    while after < head:
        entries = store.log.read(after, limit=READ_BATCH)
        if decode:
            _ = [entry.payload for entry in entries]
        after = entries[-1].position
        seen += len(entries)
    return seen / (time.perf_counter() - start)


def log_read(backend: Backend, settings: Settings) -> Comparison:
    with backend.connect("bench_log") as store:
        store.migrate()
        fill_rate = fill_log(store, settings.log_events)
        start = time.perf_counter()
        head = store.log.head()  # on PostgreSQL this sequences the whole backlog
        head_seconds = time.perf_counter() - start
        tail(store, head, decode=True)  # warm caches and the decoder
        decoded, raw = alternate(
            lambda: tail(store, head, decode=True),
            lambda: tail(store, head, decode=False),
            settings.reps,
        )
    notes = [
        f"log fill: {settings.log_events:,} events appended at {fill_rate:,.0f} ev/s "
        f"(append_many, {FILL_BATCH} per tx); first log.head() took {head_seconds:.2f} s"
    ]
    result = Comparison(
        backend.name,
        f"log read {head:,} (limit {READ_BATCH})",
        1,
        "ev/s",
        "decoded",
        "raw",
        decoded,
        raw,
        notes=notes,
    )
    progress(result)
    return result


# -- driver ------------------------------------------------------------------------------


def progress(result: Comparison) -> None:
    print(
        f"  [{result.engine}] {result.name} x{result.conns}: "
        f"{result.a_label} {result.a_median:,.0f}, {result.b_label} {result.b_median:,.0f} "
        f"{result.unit}, ratio {result.ratio:.2f}",
        file=sys.stderr,
        flush=True,
    )


def run_engine(engine: str, settings: Settings) -> list[Comparison]:
    backend = make_backend(engine)
    try:
        return [*run_transactions(backend, settings), log_read(backend, settings)]
    finally:
        backend.close()


def run_transactions(backend: Backend, settings: Settings) -> list[Comparison]:
    runner = Runner(max(settings.threads))
    try:
        with backend.connect("bench") as store:
            store.migrate()
            backend.create_orders(store)
            backend.prewarm(store, max(settings.threads))
            return EngineBench(backend, store, runner, settings).run_all()
    finally:
        runner.close()


def engines_arg(value: str) -> tuple[str, ...]:
    engines = tuple(e.strip() for e in value.split(",") if e.strip())
    unknown = set(engines) - set(ENGINES)
    if not engines or unknown:
        raise argparse.ArgumentTypeError(f"choose from {','.join(ENGINES)}")
    return engines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 rep, 0.5 s, 20k log events")
    parser.add_argument("--engines", type=engines_arg, default=ENGINES, help="sqlite,postgres")
    parser.add_argument("--seconds", type=float, help="per measurement (default 2, quick 0.5)")
    parser.add_argument("--reps", type=int, help="repetitions (default 5, quick 1)")
    parser.add_argument("--log-events", type=int, help="log size (default 100000, quick 20000)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    seconds = args.seconds or (0.5 if args.quick else 2.0)
    return Settings(
        engines=args.engines,
        reps=args.reps or (1 if args.quick else 5),
        seconds=seconds,
        warmup=max(0.2, 0.15 * seconds),
        log_events=args.log_events or (20_000 if args.quick else 100_000),
    )


def load_average() -> str:
    """The 1-minute load average (other work on the machine makes the numbers noisy)."""
    return f"{os.getloadavg()[0]:.2f}"


def git_commit() -> str:
    """The library version measured (the repository's HEAD)."""
    command = ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def write_json(path: Path, settings: Settings, results: list[Comparison], elapsed: float) -> None:
    meta = {
        "settings": {**asdict(settings), "slices": settings.slices},
        "load_average_at_end": load_average(),
        "commit": git_commit(),
        "started": datetime.now(UTC).isoformat(),
        "elapsed_seconds": elapsed,
        "python": sys.version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    document = {"meta": meta, "results": [r.to_json() for r in results]}
    path.write_text(json.dumps(document, indent=2) + "\n", "utf-8")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    print(
        f"alkstore append benchmark at {git_commit()}: engines={','.join(settings.engines)} "
        f"reps={settings.reps} "
        f"seconds={settings.seconds} log_events={settings.log_events:,} cpus={os.cpu_count()} "
        f"load={load_average()}",
        flush=True,
    )
    start = time.perf_counter()
    results = [r for engine in settings.engines for r in run_engine(engine, settings)]
    elapsed = time.perf_counter() - start
    print(f"\n{render_table(results)}\n", flush=True)
    print(
        f"total {elapsed:.0f} s; medians of {settings.reps} alternating reps; "
        f"load average now {load_average()} on {os.cpu_count()} cpus",
        flush=True,
    )
    if args.json:
        write_json(args.json, settings, results, elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
