"""A worker module for the CLI shutdown tests (tests/faults/test_worker_shutdown.py).

Run as a user runs it: `python -m relay.cli worker tests.faults.slow_jobs:worker --db URL`.
Everything else comes from the environment the test sets:

- `ALKSTORE_TEST_NS`: the namespace (the CLI's `--db` sets `ALKSTORE_DB` before import);
- `SLOW_JOBS_STARTED` / `SLOW_JOBS_FINISHED`: files the handler appends
  `"<pid> <job id> <attempt>"` lines to when it starts and when it *finishes* a job;
- `SLOW_JOBS_SLEEP` (seconds per job), `SLOW_JOBS_GRACE`, `SLOW_JOBS_VISIBILITY`,
  `SLOW_JOBS_CONCURRENCY`.

Importing this module connects to the database, so nothing but the CLI imports it.
"""

from __future__ import annotations

import os
import time

import alkstore
import relay

QUEUE = "slow"
SLEEP = float(os.environ.get("SLOW_JOBS_SLEEP", "0.5"))
STARTED = os.environ["SLOW_JOBS_STARTED"]
FINISHED = os.environ["SLOW_JOBS_FINISHED"]

worker = relay.Worker(
    alkstore.connect(os.environ["ALKSTORE_DB"], namespace=os.environ["ALKSTORE_TEST_NS"]),
    concurrency=int(os.environ.get("SLOW_JOBS_CONCURRENCY", "4")),
    grace=float(os.environ.get("SLOW_JOBS_GRACE", "30")),
    visibility=float(os.environ.get("SLOW_JOBS_VISIBILITY", "30")),
    poll=0.2,
)


def _record(path: str, job: alkstore.Job[dict[str, int]]) -> None:
    """One short line per write(2) on an O_APPEND file: lines never interleave."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {job.id} {job.attempt}\n")


@worker.handler(QUEUE, concurrency=int(os.environ.get("SLOW_JOBS_CONCURRENCY", "4")))
def slow(job: alkstore.Job[dict[str, int]]) -> None:
    _record(STARTED, job)
    time.sleep(SLEEP)
    _record(FINISHED, job)
