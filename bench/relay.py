"""Relay benchmark: events relayed per second, and append-commit to job-claimable latency.

Run it from the repository root (about 2 minutes; `--quick` takes under one):

    python bench/relay.py [--quick] [--engines sqlite,postgres] [--reps 3]
                          [--events 100000] [--samples 200] [--interval 0.02]
                          [--log-events 0] [--backlog 1000000] [--relay-samples 200]
                          [--json results.json]

On each engine, in one run (a fresh log; `--log-events N` measures a large log instead,
see below):

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

Large-log mode (`--log-events N`, e.g. 1000000 or 10000000; a 10M run takes about 10
minutes): a namespace is pre-filled with N events by one set-based INSERT (untimed), and
its one subscription starts at the head (everything already relayed); a second
namespace holds a 1,000-event log the same way. On each engine:

a. one new event: append one event (untimed), then time `store.relay_batch()` (the
   PostgreSQL sequencer included); `--relay-samples` per log per repetition, small and
   large log alternating in slices of 20. Reported: the median on each log and the ratio
   large/small per repetition. Target (issue 13, at 10M): <= 2x.
b. catch-up: the subscription is moved back `--backlog` events (`store.replay`), the
   jobs table emptied, and relay_batch() (batch 5,000) runs until caught up. Targets:
   >= 150,000 events/s on PostgreSQL, >= 250,000 on SQLite. The first and last 10 % of
   the backlog are timed apart (a cost that grows as the relay advances shows there).
c. latency, as in 2., on the small and on the large log (one repetition each in turn, a
   relay process started for each). Targets with N retained: p50 <= 3 ms, p99 <= 10 ms.

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
    fill_log,
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
RATIO_TARGET = 2.0  # one new event, large log / 1k log (issue 13, at 10M events)
LARGE_LATENCY_TARGETS = (3.0, 10.0)  # ms: p50, p99 with 10M events retained
CATCH_UP_TARGETS = {"postgres": 150_000.0, "sqlite": 250_000.0}  # events/s
SMALL_LOG = 1_000
SLICE = 20  # single-event samples in a row on one log before switching to the other
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
    log_events: int = 0  # 0: a fresh log (throughput + latency); N: the large-log mode
    backlog: int = 1_000_000
    relay_samples: int = 200
    subscriptions: tuple[int, ...] = (1, 4)


# -- 1. throughput -----------------------------------------------------------------------


def append_log(store: alkstore.Store, count: int) -> float:
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


def relay_all(
    store: alkstore.Store, marks: list[tuple[int, float]] | None = None
) -> tuple[int, int, float]:
    """relay_batch() until caught up: (events covered, jobs created, seconds). `marks`
    receives (events covered so far, seconds so far) after every batch."""
    events = jobs = 0
    start = time.perf_counter()
    while True:
        created, covered = store.relay_batch(batch=RELAY_BATCH)
        events += covered
        jobs += created
        if marks is not None:
            marks.append((events, time.perf_counter() - start))
        if not covered:
            return events, jobs, time.perf_counter() - start


def throughput(backend: Backend, settings: Settings) -> list[Metric]:
    engine = backend.name
    rates: dict[int, list[float]] = {n: [] for n in settings.subscriptions}
    job_rates: dict[int, list[float]] = {n: [] for n in settings.subscriptions}
    with backend.connect("bench_relay") as store:
        store.migrate()
        fill_seconds = append_log(store, settings.events)
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


def latency_samples(
    backend: Backend, settings: Settings, workdir: Path, namespace: str, reps: int
) -> tuple[int, list[list[Sample]]]:
    """(events retained, samples per rep): commit -> claimed through a relay process, on
    `namespace` with its log as it is (other subscriptions are removed first)."""
    log_path = workdir / f"relay-{backend.name}.log"
    samples: list[list[Sample]] = []
    with backend.connect(namespace) as store:
        store.migrate()
        for subscription in store.subscriptions():
            if subscription.queue != "latency":
                store.unsubscribe(subscription.queue)
        store.subscribe("latency", PATTERNS, start="now")
        queue = store.queue("latency")
        queue.config()
        listener = store.listen()
        args = ["relay", "--db", backend.url, "--namespace", store.namespace]
        retained = store.log.head()
        with cli_process(args, log_path) as process:
            try:
                sample(store, queue, listener, 0, FIRST_SAMPLE_TIMEOUT)  # the relay is up
                order_id = 1
                for _ in range(WARMUP_SAMPLES):
                    sample(store, queue, listener, order_id, SAMPLE_TIMEOUT)
                    order_id += 1
                for _ in range(reps):
                    rep = []
                    start = time.perf_counter()
                    for i in range(settings.samples):
                        pace(start, i, settings.interval)
                        rep.append(sample(store, queue, listener, order_id, SAMPLE_TIMEOUT))
                        order_id += 1
                    samples.append(rep)
            except (TimeoutError, RuntimeError) as exc:
                raise RuntimeError(f"{exc}; relay log:\n{tail_of(log_path)}") from exc
            if process.poll() is not None:
                raise RuntimeError(f"the relay exited early:\n{tail_of(log_path)}")
    return retained, samples


def latency_rows(
    engine: str,
    settings: Settings,
    retained: int,
    reps: list[list[Sample]],
    targets: tuple[float | None, float | None],
) -> list[Metric]:
    claimable = [[s.claimable for s in rep] for rep in reps]
    claimed = [[s.claimed for s in rep] for rep in reps]
    every = [s for rep in reps for s in rep]
    notes = [
        f"relay latency ({retained:,} retained): {sum(s.empty_claims for s in every)} empty "
        f"claims (wakes for other commits) and {sum(s.timeouts for s in every)} {POLL:g}-s "
        f"poll timeouts (missed wakes) over {len(every)} samples, "
        f"{settings.interval * 1000:.0f} ms apart; relay as a subprocess"
    ]
    name = f"commit -> claimed, {retained:,} events retained"
    rows = latency_metrics(engine, name, claimed, targets, notes=notes)
    for row, pct in zip(rows, (50, 99), strict=True):
        started = median(percentile(rep, pct) for rep in claimable) * 1000
        row.detail = f"the claim that got it started at p{pct} {started:.2f} ms"
    rows[-1].detail += f"; max {max(max(rep) for rep in claimed) * 1000:.1f} ms"
    for row in rows:
        progress(row)
    return rows


def latency(backend: Backend, settings: Settings, workdir: Path) -> list[Metric]:
    namespace = "bench_relay_latency"
    retained, reps = latency_samples(backend, settings, workdir, namespace, settings.reps)
    return latency_rows(backend.name, settings, retained, reps, LATENCY_TARGETS)


# -- 3. the large log --------------------------------------------------------------------


def relayed_log(backend: Backend, namespace: str, count: int) -> tuple[alkstore.Store, float]:
    """A store whose log holds `count` events, all relayed (one subscription at the head)."""
    store = backend.connect(namespace)
    store.migrate()
    start = time.perf_counter()
    fill_log(backend, store, count)
    seconds = time.perf_counter() - start
    store.subscribe("relayed", PATTERNS, start="now")
    store.queue("relayed").config()
    return store, seconds


def relay_one(store: alkstore.Store, order_id: int) -> float:
    """Append one event (untimed); seconds that relay_batch() takes to turn it into a job."""
    with store.transaction() as tx:
        tx.append(order_event(order_id))
    start = time.perf_counter()
    jobs, covered = store.relay_batch(batch=RELAY_BATCH)
    seconds = time.perf_counter() - start
    if (jobs, covered) != (1, 1):
        raise RuntimeError(f"one new event made {jobs} jobs covering {covered} positions")
    return seconds


def single_event(
    engine: str, settings: Settings, small: alkstore.Store, large: alkstore.Store
) -> list[Metric]:
    """(a): one new event relayed on the small and on the large log, alternating."""
    per_log: dict[str, list[float]] = {"small": [], "large": []}  # median ms per repetition
    ratios = []
    order_id = 0
    for store in (small, large):  # warm up: prepared statements, caches
        for _ in range(SLICE):
            relay_one(store, order_id := order_id + 1)
    for rep in range(settings.reps):
        samples: dict[str, list[float]] = {"small": [], "large": []}
        order = [("small", small), ("large", large)]
        if rep % 2:
            order.reverse()
        for _ in range(max(1, settings.relay_samples // SLICE)):
            for name, store in order:
                for _ in range(SLICE):
                    samples[name].append(relay_one(store, order_id := order_id + 1))
        for name in per_log:
            per_log[name].append(median(samples[name]) * 1000)
        ratios.append(per_log["large"][-1] / per_log["small"][-1])
    size = f"{settings.log_events:,}"
    rows = [
        Metric(engine, f"relay 1 new event, {SMALL_LOG:,}-event log", "ms", per_log["small"]),
        Metric(engine, f"relay 1 new event, {size}-event log", "ms", per_log["large"]),
        Metric(
            engine,
            f"  ratio {size} / {SMALL_LOG:,}",
            "x",
            ratios,
            RATIO_TARGET,
            better="lower",
            detail=f"{settings.relay_samples} samples per log per rep, slices of {SLICE}",
        ),
    ]
    for row in rows:
        progress(row)
    return rows


def catch_up(backend: Backend, settings: Settings, store: alkstore.Store) -> list[Metric]:
    """(b): relay a backlog of `settings.backlog` events at the end of the large log."""
    head = store.log.head()
    backlog = min(settings.backlog, head)
    rates, first, last = [], [], []
    tenth = max(1, backlog // 10)
    for _ in range(settings.reps):
        clear_jobs(backend, store)
        backend.vacuum(store.namespace, "jobs")
        store.replay("relayed", head - backlog + 1)
        marks: list[tuple[int, float]] = []
        events, jobs, seconds = relay_all(store, marks)
        if events != backlog or jobs != backlog:
            raise RuntimeError(f"relayed {events} events into {jobs} jobs, not {backlog}")
        rates.append(events / seconds)
        first.append(_rate_between(marks, 0, tenth))
        last.append(_rate_between(marks, backlog - tenth, backlog))
    row = Metric(
        backend.name,
        f"catch up {backlog:,} events, {head:,} retained",
        "ev/s",
        rates,
        CATCH_UP_TARGETS[backend.name],
        detail=(
            f"first 10 % {median(first):,.0f} ev/s, last 10 % {median(last):,.0f} ev/s; "
            f"batch {RELAY_BATCH:,}, 1 subscription"
        ),
    )
    progress(row)
    return [row]


def _rate_between(marks: list[tuple[int, float]], low: int, high: int) -> float:
    """Events/s over the batches that covered positions low..high of the backlog."""
    before = max(((e, t) for e, t in marks if e <= low), default=(0, 0.0))
    after = min(((e, t) for e, t in marks if e >= high), default=marks[-1])
    return (after[0] - before[0]) / max(after[1] - before[1], 1e-9)


def large_log(backend: Backend, settings: Settings, workdir: Path) -> list[Metric]:
    small, _ = relayed_log(backend, "bench_relay_small", SMALL_LOG)
    try:
        large, fill_seconds = relayed_log(backend, "bench_relay_large", settings.log_events)
        try:
            rows = single_event(backend.name, settings, small, large)
            rows[1].notes.append(
                f"large log: {settings.log_events:,} events inserted set-based in "
                f"{fill_seconds:.1f} s (untimed)"
            )
            rows += catch_up(backend, settings, large)
        finally:
            large.close()
    finally:
        small.close()
    return [*rows, *large_log_latency(backend, settings, workdir)]


def large_log_latency(backend: Backend, settings: Settings, workdir: Path) -> list[Metric]:
    """(c): commit -> claimed on the small and the large log, alternating repetitions."""
    namespaces = ["bench_relay_small", "bench_relay_large"]
    retained = dict.fromkeys(namespaces, 0)
    reps: dict[str, list[list[Sample]]] = {ns: [] for ns in namespaces}
    for rep in range(settings.reps):
        for namespace in namespaces if rep % 2 == 0 else namespaces[::-1]:
            count, samples = latency_samples(backend, settings, workdir, namespace, 1)
            retained[namespace] = count
            reps[namespace] += samples
    small, large = namespaces
    return [
        *latency_rows(backend.name, settings, retained[small], reps[small], (None, None)),
        *latency_rows(backend.name, settings, retained[large], reps[large], LARGE_LATENCY_TARGETS),
    ]


# -- driver ------------------------------------------------------------------------------


def run_engine(engine: str, settings: Settings, workdir: Path) -> list[Metric]:
    backend = make_backend(engine)
    try:
        if settings.log_events:
            return large_log(backend, settings, workdir)
        return [*throughput(backend, settings), *latency(backend, settings, workdir)]
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--events", type=int, help="events to relay (100000, quick 20000)")
    parser.add_argument("--samples", type=int, default=200, help="latency samples per rep")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between samples")
    parser.add_argument(
        "--log-events", type=int, default=0, help="large-log mode: events retained (0: off)"
    )
    parser.add_argument("--backlog", type=int, default=1_000_000, help="large-log catch-up")
    parser.add_argument(
        "--relay-samples", type=int, default=200, help="single-event relays per log per rep"
    )
    args = parser.parse_args(argv)
    settings = Settings(
        engines=args.engines,
        reps=args.reps or (1 if args.quick else 3),
        events=args.events or (20_000 if args.quick else 100_000),
        samples=args.samples,
        interval=args.interval,
        log_events=args.log_events,
        backlog=args.backlog,
        relay_samples=args.relay_samples,
    )
    run = Run("relay", {**asdict(settings), "engines": ",".join(settings.engines)})
    run.announce()
    with tempfile.TemporaryDirectory(prefix="alkstore_bench_relay_") as workdir:
        results = [m for e in settings.engines for m in run_engine(e, settings, Path(workdir))]
    run.report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
