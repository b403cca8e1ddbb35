"""Relay benchmark: events relayed per second, and append-commit to job-claimable latency.

Run it from the repository root (about 2 minutes; `--quick` takes under one):

    python bench/relay.py [--quick] [--engines sqlite,postgres] [--reps 3]
                          [--events 100000] [--samples 200] [--interval 0.02]
                          [--json results.json]

On each engine, in one run:

1. throughput: 100,000 events are appended up front (append_many, 5,000 per
   transaction; on PostgreSQL `log.head()` then sequences them, untimed). For 1 and for
   4 subscriptions (all matching `bench.*`), the jobs table is emptied and the
   subscriptions start at the beginning; then `store.relay_batch()` (batch 5,000) runs in a
   loop until it covers nothing: events/s = events covered / time. Each repetition
   measures both subscription counts, in alternating order. Targets (1 subscription):
   >= 20,000 events/s on PostgreSQL, >= 50,000 on SQLite.
2. latency: an idle relay runs as its own process (`python -m relay.cli relay`, as in
   production); 200 samples about 20 ms apart, each one event appended in its own
   transaction. The time starts when the commit returned; the consumer (this process)
   waits on `store.listen()` as a worker does (timeout 1 s, the worker's poll) and
   claims after every wake; the time ends when the claim that got the job returned (an
   upper bound of "claimable": it includes that claim's own commit). The start of that
   claim is shown beside it. Targets: p50 <= 5 ms, p99 <= 20 ms on both engines
   (medians over the repetitions).

SQLite runs on a file in a temp directory; PostgreSQL on a throwaway database (see
bench/_common.py), dropped at the end. The script always exits 0.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/relay.py`

import alkstore
from bench._common import (
    Backend,
    Metric,
    OrderPlaced,
    Run,
    base_parser,
    clear_jobs,
    cli_process,
    latency_metrics,
    make_backend,
    order_event,
    pace,
    percentile,
    progress,
    tail_of,
)

THROUGHPUT_TARGETS = {"postgres": 20_000.0, "sqlite": 50_000.0}  # events/s, 1 subscription
LATENCY_TARGETS = (5.0, 20.0)  # ms: p50, p99
FILL_BATCH = 5_000
RELAY_BATCH = 5_000
PATTERNS = ["bench.*"]
WARMUP_SAMPLES = 10
POLL = 1.0  # the consumer's re-poll when no wake comes (relay.Worker's default poll)
FIRST_SAMPLE_TIMEOUT = 30.0  # the relay process starting up
SAMPLE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Settings:
    engines: tuple[str, ...]
    reps: int
    events: int
    samples: int
    interval: float
    subscriptions: tuple[int, ...] = (1, 4)


# -- 1. throughput -----------------------------------------------------------------------


def fill_log(store: alkstore.Store, count: int) -> float:
    """Append `count` events in batched transactions; returns seconds (head included)."""
    start = time.perf_counter()
    for first in range(0, count, FILL_BATCH):
        with store.transaction() as tx:
            tx.append_many(order_event(i) for i in range(first, min(first + FILL_BATCH, count)))
    store.log.head()  # PostgreSQL: sequence the backlog now, not inside a measurement
    return time.perf_counter() - start


def reset(backend: Backend, store: alkstore.Store, subscriptions: int) -> None:
    """No jobs, and `subscriptions` subscriptions at checkpoint 0 (untimed)."""
    for subscription in store.subscriptions():
        store.unsubscribe(subscription.queue)
    clear_jobs(backend, store)
    for i in range(subscriptions):
        store.subscribe(f"relayed_{i}", PATTERNS, start="beginning")
    backend.vacuum(store.namespace, "jobs")
    backend.vacuum(store.namespace, "subscriptions")


def relay_all(store: alkstore.Store) -> tuple[int, int, float]:
    """relay_batch() until caught up: (events covered, jobs created, seconds)."""
    events = jobs = 0
    start = time.perf_counter()
    while True:
        created, covered = store.relay_batch(batch=RELAY_BATCH)
        events += covered
        jobs += created
        if not covered:
            return events, jobs, time.perf_counter() - start


def throughput(backend: Backend, settings: Settings) -> list[Metric]:
    engine = backend.name
    rates: dict[int, list[float]] = {n: [] for n in settings.subscriptions}
    job_rates: dict[int, list[float]] = {n: [] for n in settings.subscriptions}
    with backend.connect("bench_relay") as store:
        store.migrate()
        fill_seconds = fill_log(store, settings.events)
        for rep in range(settings.reps):
            order = settings.subscriptions if rep % 2 == 0 else settings.subscriptions[::-1]
            for subs in order:
                reset(backend, store, subs)
                events, jobs, seconds = relay_all(store)
                if events != settings.events or jobs != events * subs:
                    raise RuntimeError(f"relayed {events} events into {jobs} jobs ({subs} subs)")
                rates[subs].append(events / seconds)
                job_rates[subs].append(jobs / seconds)
    rows = []
    for subs in settings.subscriptions:
        row = Metric(
            engine,
            f"relay {settings.events:,} events, {subs} subscription{'s' if subs > 1 else ''}",
            "ev/s",
            rates[subs],
            THROUGHPUT_TARGETS[engine] if subs == 1 else None,
            detail=f"{median(job_rates[subs]):,.0f} jobs/s; batch {RELAY_BATCH:,}",
        )
        if subs == settings.subscriptions[0]:
            row.notes.append(
                f"log fill: {settings.events:,} events appended (and sequenced) in "
                f"{fill_seconds:.1f} s"
            )
        progress(row)
        rows.append(row)
    return rows


# -- 2. latency --------------------------------------------------------------------------


@dataclass
class Sample:
    claimable: float  # seconds from commit to the start of the successful claim
    claimed: float  # ... to its return
    empty_claims: int  # claims that found nothing first (wakes for other commits)
    timeouts: int  # waits that ran into POLL without a wake


def sample(
    store: alkstore.Store,
    queue: alkstore.Queue,
    listener: alkstore.Listener,
    order_id: int,
    timeout: float,
) -> Sample:
    """Append one event; wait as a worker does; claim on every wake until the job comes."""
    with store.transaction() as tx:
        tx.append(order_event(order_id))
    committed = time.perf_counter()
    empty = timeouts = 0
    while True:
        if not listener.wait(POLL):
            timeouts += 1
        started = time.perf_counter()
        job = queue.claim()
        if job is not None:
            break
        empty += 1
        if started - committed > timeout:
            raise TimeoutError(f"event {order_id} not claimable after {timeout:.0f} s")
    claimed = time.perf_counter()
    payload = job.payload
    if not isinstance(payload, OrderPlaced) or payload.order_id != order_id:
        raise RuntimeError(f"claimed {payload!r}, expected order {order_id}")
    job.ack()
    return Sample(started - committed, claimed - committed, empty, timeouts)


def latency(backend: Backend, settings: Settings, workdir: Path) -> list[Metric]:
    engine = backend.name
    log_path = workdir / f"relay-{engine}.log"
    reps: list[list[Sample]] = []
    with backend.connect("bench_relay_latency") as store:
        store.migrate()
        store.subscribe("latency", PATTERNS, start="now")
        queue = store.queue("latency")
        queue.config()
        listener = store.listen()
        args = ["relay", "--db", backend.url, "--namespace", store.namespace]
        with cli_process(args, log_path) as process:
            try:
                sample(store, queue, listener, 0, FIRST_SAMPLE_TIMEOUT)  # the relay is up
                order_id = 1
                for _ in range(WARMUP_SAMPLES):
                    sample(store, queue, listener, order_id, SAMPLE_TIMEOUT)
                    order_id += 1
                for _ in range(settings.reps):
                    samples = []
                    start = time.perf_counter()
                    for i in range(settings.samples):
                        pace(start, i, settings.interval)
                        samples.append(sample(store, queue, listener, order_id, SAMPLE_TIMEOUT))
                        order_id += 1
                    reps.append(samples)
            except (TimeoutError, RuntimeError) as exc:
                raise RuntimeError(f"{exc}; relay log:\n{tail_of(log_path)}") from exc
            if process.poll() is not None:
                raise RuntimeError(f"the relay exited early:\n{tail_of(log_path)}")
    claimable = [[s.claimable for s in rep] for rep in reps]
    claimed = [[s.claimed for s in rep] for rep in reps]
    every = [s for rep in reps for s in rep]
    notes = [
        f"relay latency: {sum(s.empty_claims for s in every)} empty claims (wakes for other "
        f"commits) and {sum(s.timeouts for s in every)} {POLL:g}-s poll timeouts "
        f"(missed wakes) over {len(every)} samples, "
        f"{settings.interval * 1000:.0f} ms apart; relay as a subprocess"
    ]
    rows = latency_metrics(engine, "commit -> claimed", claimed, LATENCY_TARGETS, notes=notes)
    for row, pct in zip(rows, (50, 99), strict=True):
        started = median(percentile(rep, pct) for rep in claimable) * 1000
        row.detail = f"the claim that got it started at p{pct} {started:.2f} ms"
    rows[-1].detail += f"; max {max(max(rep) for rep in claimed) * 1000:.1f} ms"
    for row in rows:
        progress(row)
    return rows


# -- driver ------------------------------------------------------------------------------


def run_engine(engine: str, settings: Settings, workdir: Path) -> list[Metric]:
    backend = make_backend(engine)
    try:
        return [*throughput(backend, settings), *latency(backend, settings, workdir)]
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--events", type=int, help="events to relay (100000, quick 20000)")
    parser.add_argument("--samples", type=int, default=200, help="latency samples per rep")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between samples")
    args = parser.parse_args(argv)
    settings = Settings(
        engines=args.engines,
        reps=args.reps or (1 if args.quick else 3),
        events=args.events or (20_000 if args.quick else 100_000),
        samples=args.samples,
        interval=args.interval,
    )
    run = Run("relay", {**asdict(settings), "engines": ",".join(settings.engines)})
    run.announce()
    with tempfile.TemporaryDirectory(prefix="alkstore_bench_relay_") as workdir:
        results = [m for e in settings.engines for m in run_engine(e, settings, Path(workdir))]
    run.report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
