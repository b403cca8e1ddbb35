"""Worker benchmark: no-op handler throughput in 1 and 2 worker processes, and
enqueue-commit to handler-start latency with an idle worker.

Run it from the repository root (about 2-3 minutes; `--quick` takes under one):

    python bench/worker.py [--quick] [--engines sqlite,postgres] [--reps 3]
                           [--jobs 50000] [--samples 200] [--interval 0.02]
                           [--concurrency N] [--metrics] [--json results.json]

Workers run as users run them: `python -m relay.cli worker bench.noop_jobs:worker
--db URL [--once]`, with the library's defaults (relay.Worker(store), one handler
`noop(job: alkstore.Job[dict[str, int]])` at its default concurrency; `--concurrency`
overrides the handler's; `--metrics` runs them with `--metrics-port 0`: Prometheus
metrics on, docs/adr/0019). On each engine, in one run:

1. throughput: 50,000 jobs are put in the queue with one SQL statement, then 1 (or 2)
   worker processes drain it with `--once` and exit. Each process reports how many jobs
   it handled and the time.time() of its first and last handler start; jobs/s = jobs /
   (last start - first start, over all processes), so process start-up and the import
   are left out (the wall-clock rate including them is shown beside). Every job must be
   handled and the queue empty afterwards. 1 and 2 processes alternate per repetition.
   Targets (1 process): >= 15,000 jobs/s on PostgreSQL, >= 30,000 on SQLite.
2. latency: one idle worker process; 200 samples about 20 ms apart, each one
   `q.enqueue({"sample": i})` in its own transaction. The producer records time.time()
   when enqueue returned (the commit is done); the handler records time.time() when it
   starts (same machine clock). Targets: p50 <= 2 ms, p99 <= 10 ms on both engines.

SQLite runs on a file in a temp directory; PostgreSQL on a throwaway database (see
bench/_common.py), dropped at the end. The script always exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/worker.py`

import alkstore
from bench._common import (
    Backend,
    Metric,
    Run,
    base_parser,
    clear_jobs,
    cli_process,
    fill_jobs,
    latency_metrics,
    make_backend,
    pace,
    progress,
    tail_of,
)

QUEUE = "noop"  # bench/noop_jobs.py's queue
TARGET = "bench.noop_jobs:worker"
THROUGHPUT_TARGETS = {"postgres": 15_000.0, "sqlite": 30_000.0}  # jobs/s, 1 process
LATENCY_TARGETS = (2.0, 10.0)  # ms: p50, p99
WARMUP_SAMPLES = 10
DRAIN_TIMEOUT = 300.0
FIRST_SAMPLE_TIMEOUT = 30.0
ARRIVAL_TIMEOUT = 10.0


@dataclass(frozen=True)
class Settings:
    engines: tuple[str, ...]
    reps: int
    jobs: int
    samples: int
    interval: float
    concurrency: int | None
    metrics: bool = False
    processes: tuple[int, ...] = (1, 2)


def worker_env(namespace: str, settings: Settings, **files: Path) -> dict[str, str]:
    env = {"NOOP_JOBS_NS": namespace}
    env.update({f"NOOP_JOBS_{name.upper()}": str(path) for name, path in files.items()})
    if settings.concurrency is not None:
        env["NOOP_JOBS_CONCURRENCY"] = str(settings.concurrency)
    return env


def metrics_args(settings: Settings) -> list[str]:
    return ["--metrics-port", "0"] if settings.metrics else []


# -- 1. throughput -----------------------------------------------------------------------


@dataclass
class Drain:
    jobs: int
    span: float  # first handler start to last, over every process
    wall: float  # spawn of the first process to exit of the last

    @property
    def rate(self) -> float:
        return self.jobs / self.span

    @property
    def wall_rate(self) -> float:
        return self.jobs / self.wall


def drain(
    backend: Backend, store: alkstore.Store, settings: Settings, processes: int, workdir: Path
) -> Drain:
    """Fill the queue, run `processes` workers with --once until they exit."""
    clear_jobs(backend, store)
    fill_jobs(backend, store, QUEUE, settings.jobs)
    backend.vacuum(store.namespace, "jobs")
    stats = workdir / f"stats-{backend.name}-{time.monotonic_ns()}.jsonl"
    log_path = workdir / f"worker-{backend.name}.log"
    env = worker_env(store.namespace, settings, stats=stats)
    args = ["worker", TARGET, "--db", backend.url, "--once", *metrics_args(settings)]
    start = time.perf_counter()
    with ExitStack() as stack:
        workers = [stack.enter_context(cli_process(args, log_path, env)) for _ in range(processes)]
        for process in workers:
            try:
                code = process.wait(DRAIN_TIMEOUT)
            except subprocess.TimeoutExpired:
                code = None
            if code != 0:
                raise RuntimeError(f"worker exited with {code}:\n{tail_of(log_path)}")
        wall = time.perf_counter() - start
    lines = [json.loads(line) for line in stats.read_text().splitlines()]
    handled = sum(line["count"] for line in lines)
    left = store.queue(QUEUE).stats()
    if len(lines) != processes or handled != settings.jobs or left.ready or left.active:
        raise RuntimeError(f"{handled} of {settings.jobs} jobs handled, left {left}: {lines}")
    first = min(line["first"] for line in lines if line["count"])
    last = max(line["last"] for line in lines if line["count"])
    return Drain(handled, last - first, wall)


def throughput(backend: Backend, settings: Settings, workdir: Path) -> list[Metric]:
    engine = backend.name
    runs: dict[int, list[Drain]] = {n: [] for n in settings.processes}
    with backend.connect("bench_worker") as store:
        store.migrate()
        for rep in range(settings.reps):
            order = settings.processes if rep % 2 == 0 else settings.processes[::-1]
            for processes in order:
                runs[processes].append(drain(backend, store, settings, processes, workdir))
    rows = []
    for processes in settings.processes:
        drains = runs[processes]
        row = Metric(
            engine,
            f"no-op jobs, {processes} worker process{'es' if processes > 1 else ''}",
            "jobs/s",
            [d.rate for d in drains],
            THROUGHPUT_TARGETS[engine] if processes == 1 else None,
            detail=(
                f"{settings.jobs:,} jobs in {median(d.span for d in drains):.2f} s; "
                f"{median(d.wall_rate for d in drains):,.0f} jobs/s with start-up"
            ),
        )
        progress(row)
        rows.append(row)
    return rows


# -- 2. latency --------------------------------------------------------------------------


def read_starts(path: Path) -> dict[int, float]:
    """sample -> handler start, from the lines the handler appended."""
    starts: dict[int, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            sample, _, at = line.partition(" ")
            if at:
                starts[int(sample)] = float(at)
    return starts


def wait_for(path: Path, samples: set[int], timeout: float) -> dict[int, float]:
    deadline = time.monotonic() + timeout
    while True:
        starts = read_starts(path)
        if samples <= starts.keys() or time.monotonic() > deadline:
            return starts
        time.sleep(0.005)


def latency(backend: Backend, settings: Settings, workdir: Path) -> list[Metric]:
    engine = backend.name
    log_path = workdir / f"worker-latency-{engine}.log"
    starts_path = workdir / f"latency-{engine}.txt"
    committed: dict[int, float] = {}
    reps: list[list[int]] = []
    with backend.connect("bench_worker_latency") as store:
        store.migrate()
        queue = store.queue(QUEUE)
        env = worker_env(store.namespace, settings, latency=starts_path)
        args = ["worker", TARGET, "--db", backend.url, *metrics_args(settings)]
        with cli_process(args, log_path, env) as process:
            queue.enqueue({"sample": 0})  # the worker is up once this one is handled
            if 0 not in wait_for(starts_path, {0}, FIRST_SAMPLE_TIMEOUT):
                raise RuntimeError(f"the worker handled nothing:\n{tail_of(log_path)}")
            sample = 1
            for rep in range(-1, settings.reps):  # rep -1: warm-up
                count = WARMUP_SAMPLES if rep < 0 else settings.samples
                ids = list(range(sample, sample + count))
                sample += count
                start = time.perf_counter()
                for i, sample_id in enumerate(ids):
                    pace(start, i, settings.interval)
                    queue.enqueue({"sample": sample_id})
                    committed[sample_id] = time.time()
                if rep >= 0:
                    reps.append(ids)
            wanted = {i for ids in reps for i in ids}
            starts = wait_for(starts_path, wanted, ARRIVAL_TIMEOUT)
            if process.poll() is not None:
                raise RuntimeError(f"the worker exited early:\n{tail_of(log_path)}")
    missing = wanted - starts.keys()
    if missing:
        raise RuntimeError(f"{len(missing)} samples never reached the handler")
    latencies = [[starts[i] - committed[i] for i in ids] for ids in reps]
    rows = latency_metrics(
        engine,
        "enqueue commit -> handler start",
        latencies,
        LATENCY_TARGETS,
        notes=[
            f"worker latency: {settings.samples} samples/rep, {settings.interval * 1000:.0f} ms "
            "apart, one idle worker process (CLI), producer in this process"
        ],
    )
    rows[0].detail = f"min {min(min(rep) for rep in latencies) * 1000:.2f} ms"
    rows[-1].detail = f"max {max(max(rep) for rep in latencies) * 1000:.1f} ms"
    for row in rows:
        progress(row)
    return rows


# -- driver ------------------------------------------------------------------------------


def run_engine(engine: str, settings: Settings, workdir: Path) -> list[Metric]:
    backend = make_backend(engine)
    try:
        return [*throughput(backend, settings, workdir), *latency(backend, settings, workdir)]
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--jobs", type=int, help="jobs per drain (50000, quick 10000)")
    parser.add_argument("--samples", type=int, default=200, help="latency samples per rep")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between samples")
    parser.add_argument("--concurrency", type=int, help="handler concurrency (library default)")
    parser.add_argument("--metrics", action="store_true", help="workers serve metrics (port 0)")
    args = parser.parse_args(argv)
    settings = Settings(
        engines=args.engines,
        reps=args.reps or (1 if args.quick else 3),
        jobs=args.jobs or (10_000 if args.quick else 50_000),
        samples=args.samples,
        interval=args.interval,
        concurrency=args.concurrency,
        metrics=args.metrics,
    )
    run = Run("worker", {**asdict(settings), "engines": ",".join(settings.engines)})
    run.announce()
    with tempfile.TemporaryDirectory(prefix="alkstore_bench_worker_") as workdir:
        results = [m for e in settings.engines for m in run_engine(e, settings, Path(workdir))]
    run.report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
