"""The worker module of bench/due.py, run the way a user runs a worker:

    python -m relay.cli worker bench.due_jobs:worker --db URL

A worker with poll=60 (every other setting the library's default) and three queues:

- `delayed`: the handler records the job;
- `retried`: the first attempt raises `relay.Retry(delay=DUE_JOBS_BACKOFF)`, the second
  is recorded;
- `died`: attempts after the first are recorded (bench/due.py claims each job first and
  never acks it: the holder died); a first attempt here means the worker claimed the job
  before bench/due.py could, and is recorded as a `race`.

Recorded = one line `"<queue> <sample> <seconds late>"` appended to `DUE_JOBS_STARTS`,
where seconds late = time.time() at handler start - the job's due time (`Job.due_ms`, the
database's clock, on this machine). `ALKSTORE_DB` (set by the CLI's `--db`) and
`DUE_JOBS_NS` say where. Importing this module connects, so only the CLI imports it.
"""

from __future__ import annotations

import os
import time

import alkstore
import relay

POLL = 60.0
STARTS = os.environ["DUE_JOBS_STARTS"]
BACKOFF = float(os.environ.get("DUE_JOBS_BACKOFF", "0.2"))

store = alkstore.connect(os.environ["ALKSTORE_DB"], namespace=os.environ["DUE_JOBS_NS"])
worker = relay.Worker(store, poll=POLL)


def _record(kind: str, job: alkstore.Job[dict[str, int]]) -> None:
    late = time.time() - job.due_ms / 1000
    with open(STARTS, "a") as f:  # one short write(2) on O_APPEND: lines never mix
        f.write(f"{kind} {job.payload['sample']} {late!r}\n")


@worker.handler("delayed")
def delayed(job: alkstore.Job[dict[str, int]]) -> None:
    _record("delayed", job)


@worker.handler("retried")
def retried(job: alkstore.Job[dict[str, int]]) -> None:
    if job.attempt == 1:
        raise relay.Retry(delay=BACKOFF)
    _record("retried", job)


@worker.handler("died")
def died(job: alkstore.Job[dict[str, int]]) -> None:
    _record("died" if job.attempt > 1 else "race", job)
