"""Due-time benchmark: how late an idle worker (poll=60) starts a job that falls due
without any commit to wake it, and what the next-due probe costs on a deep queue.

Run it from the repository root (about 5 minutes; `--quick` about one):

    python bench/due.py [--quick] [--engines sqlite,postgres] [--reps 3] [--samples 50]
                        [--delay 0.2] [--depth 1000000] [--json results.json]

On each engine, in one run:

1. precision: one idle worker process, run as users run it (`python -m relay.cli worker
   bench.due_jobs:worker --db URL`; relay.Worker(store, poll=60), the library's other
   defaults). Three kinds of job, one at a time, each after the worker has gone idle:
   a job enqueued with `delay` (`delayed`); a job whose handler raises
   `relay.Retry(delay=...)` on its first attempt (`retried`, the second attempt is
   timed); a job this process claims with `visibility=delay` and never acks (`died`;
   the worker's later claim is timed). Lateness = handler start (time.time()) - the
   job's due time (`Job.due_ms`, the database's clock on this machine). The kinds
   alternate in order per repetition. Target: p99 <= 10 ms (issue 13).
2. cost: `depth` jobs delayed by an hour in one queue, at 1 and at 32 priority levels;
   the median time of `Queue.next_due()` (what an idle worker asks after each empty
   claim) and, beside it, of an empty `claim_many(10)` on the same queue.

SQLite runs on a file in a temp directory; PostgreSQL on a throwaway database (see
bench/_common.py), dropped at the end. The script always exits 0.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/due.py`

import alkstore
from bench._common import (
    Backend,
    Metric,
    Run,
    base_parser,
    cli_process,
    latency_metrics,
    make_backend,
    now_ms,
    progress,
    tail_of,
)

TARGET = "bench.due_jobs:worker"
KINDS = ("delayed", "retried", "died")
P99_TARGET = 10.0  # ms
IDLE_GAP = (0.02, 0.08)  # seconds between one sample's start and the next enqueue (random)
START_TIMEOUT = 30.0  # the worker process starting up
SAMPLE_TIMEOUT = 70.0  # one sample: more than the worker's poll, so a miss still ends
PROBES = 200


@dataclass(frozen=True)
class Settings:
    engines: tuple[str, ...]
    reps: int
    samples: int
    delay: float
    depth: int


# -- 1. precision ------------------------------------------------------------------------


class Starts:
    """The lines bench/due_jobs.py appends: (queue, sample) -> seconds late."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read = 0
        self.late: dict[tuple[str, int], float] = {}

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path) as f:
            f.seek(self._read)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self._read += len(complete)
        for line in complete.splitlines():
            kind, sample, late = line.split()
            self.late[(kind, int(sample))] = float(late)

    def wait(self, kind: str, sample: int, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while (kind, sample) not in self.late:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.002)
            self.poll()
        return self.late[(kind, sample)]


def one_sample(store: alkstore.Store, kind: str, sample: int, delay: float) -> bool:
    """Set one sample going; False when the worker claimed a `died` job before we could."""
    q = store.queue(kind)
    payload = {"sample": sample}
    if kind == "delayed":
        q.enqueue(payload, delay=delay)
    elif kind == "retried":
        q.enqueue(payload)
    else:
        q.enqueue(payload)
        job = q.claim(visibility=delay)  # ... and the holder dies: no heartbeat, no ack
        if job is None:
            return False
        assert job.payload == payload
    return True


def precision(backend: Backend, settings: Settings, workdir: Path) -> list[Metric]:
    engine = backend.name
    log_path = workdir / f"worker-due-{engine}.log"
    starts = Starts(workdir / f"due-{engine}.txt")
    late: dict[str, list[list[float]]] = {kind: [] for kind in KINDS}
    races = 0
    with backend.connect("bench_due") as store:
        store.migrate()
        env = {
            "DUE_JOBS_NS": store.namespace,
            "DUE_JOBS_STARTS": str(starts.path),
            "DUE_JOBS_BACKOFF": str(settings.delay),
        }
        args = ["worker", TARGET, "--db", backend.url]
        with cli_process(args, log_path, env) as process:
            store.queue("delayed").enqueue({"sample": 0})  # up once this one is handled
            if starts.wait("delayed", 0, START_TIMEOUT) is None:
                raise RuntimeError(f"the worker handled nothing:\n{tail_of(log_path)}")
            sample = 1
            for rep in range(settings.reps):
                for kind in KINDS if rep % 2 == 0 else KINDS[::-1]:
                    values: list[float] = []
                    while len(values) < settings.samples:
                        time.sleep(random.uniform(*IDLE_GAP))  # the worker goes idle
                        sample += 1
                        if not one_sample(store, kind, sample, settings.delay):
                            races += 1
                            continue
                        value = starts.wait(kind, sample, SAMPLE_TIMEOUT)
                        if value is None or process.poll() is not None:
                            raise RuntimeError(
                                f"{kind} sample {sample} never started:\n{tail_of(log_path)}"
                            )
                        values.append(value)
                    late[kind].append(values)
    rows = []
    for kind in KINDS:
        flat = [v for rep in late[kind] for v in rep]
        rows += latency_metrics(
            engine,
            f"{kind} job: due -> handler start",
            late[kind],
            (None, P99_TARGET),
            detail=f"min {min(flat) * 1000:.2f} ms, max {max(flat) * 1000:.1f} ms",
        )
    rows[-1].notes.append(
        f"due precision: {settings.samples} samples/kind/rep, delay/backoff/lease "
        f"{settings.delay} s, one idle worker process (CLI, poll=60); "
        f"{races} died samples taken by the worker first (retried)"
    )
    for row in rows:
        progress(row)
    return rows


# -- 2. cost on a deep queue -------------------------------------------------------------


def fill_delayed(backend: Backend, store: alkstore.Store, count: int, levels: int) -> None:
    """`count` jobs in queue `deep`, due in an hour or so, over `levels` priorities."""
    jobs = backend.table(store.namespace, "jobs")
    later = now_ms() + 3_600_000
    columns = "queue, priority, visible_at, enqueued_at, max_attempts, payload"
    if backend.name == "postgres":
        query = (
            f"INSERT INTO {jobs} ({columns}) SELECT 'deep', g %% %s, %s + g, %s, 5, "
            "jsonb_build_object('n', g) FROM generate_series(1, %s) AS g"
        )
        params: tuple[int, ...] = (levels, later, later - 3_600_000, count)
    else:
        query = (
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
            f"INSERT INTO {jobs} ({columns}) SELECT 'deep', i % ?, ? + i, ?, 5, "
            "json_object('n', i) FROM c"
        )
        params = (count, levels, later, later - 3_600_000)
    with store.transaction() as tx:
        tx.connection.execute(query, params)
    backend.vacuum(store.namespace, "jobs")


def median_ms(fn: Callable[[], object], n: int = PROBES) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def cost(backend: Backend, settings: Settings) -> list[Metric]:
    rows = []
    for levels in (1, 32):
        probe: list[float] = []
        claim: list[float] = []
        with backend.connect(f"bench_due_deep_{levels}") as store:
            store.migrate()
            fill_delayed(backend, store, settings.depth, levels)
            q = store.queue("deep")

            def empty_claim(q: alkstore.Queue = q) -> None:
                assert not q.claim_many(10, visibility=30)

            for _ in range(settings.reps):
                probe.append(median_ms(q.next_due))
                claim.append(median_ms(empty_claim, n=20))
        row = Metric(
            backend.name,
            f"next_due(), {settings.depth:,} delayed, {levels} priorit"
            + ("y" if levels == 1 else "ies"),
            "ms",
            probe,
            better="lower",
            detail=f"an empty claim_many(10) beside it: {statistics.median(claim):.2f} ms",
        )
        progress(row)
        rows.append(row)
    return rows


# -- driver ------------------------------------------------------------------------------


def run_engine(engine: str, settings: Settings, workdir: Path) -> list[Metric]:
    backend = make_backend(engine)
    try:
        rows = precision(backend, settings, workdir)
        return rows + cost(backend, settings) if settings.depth else rows
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--samples", type=int, help="samples per kind and rep (50, quick 20)")
    parser.add_argument("--delay", type=float, default=0.2, help="delay/backoff/lease, seconds")
    parser.add_argument(
        "--depth", type=int, help="delayed jobs for the cost (1M, quick 100k; 0: skip it)"
    )
    args = parser.parse_args(argv)
    settings = Settings(
        engines=args.engines,
        reps=args.reps or (1 if args.quick else 3),
        samples=args.samples or (20 if args.quick else 50),
        delay=args.delay,
        depth=(100_000 if args.quick else 1_000_000) if args.depth is None else args.depth,
    )
    run = Run("due", {**asdict(settings), "engines": ",".join(settings.engines)})
    run.announce()
    with tempfile.TemporaryDirectory(prefix="alkstore_bench_due_") as workdir:
        results = [m for e in settings.engines for m in run_engine(e, settings, Path(workdir))]
    run.report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
