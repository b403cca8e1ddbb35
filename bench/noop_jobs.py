"""A no-op worker module for bench/worker.py, run the way a user runs a worker:

    python -m relay.cli worker bench.noop_jobs:worker --db URL [--once]

Everything else comes from the environment bench/worker.py sets:

- `ALKSTORE_DB`: the database (the CLI's `--db` sets it before this module is imported);
- `NOOP_JOBS_NS`: the namespace;
- `NOOP_JOBS_STATS`: a file this process appends one JSON line to when it exits:
  {"pid", "count", "first", "last"}: jobs handled, and the `time.time()` of the first and
  the last handler start;
- `NOOP_JOBS_LATENCY` (optional): a file the handler appends `"<sample> <time.time()>"` to,
  at handler start, for every job whose payload has a "sample" key;
- `NOOP_JOBS_CONCURRENCY` (optional): the handler's concurrency (default: the library's).

Importing this module connects to the database, so nothing but the CLI imports it.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

import alkstore
import relay

QUEUE = "noop"
STATS = os.environ.get("NOOP_JOBS_STATS")
LATENCY = os.environ.get("NOOP_JOBS_LATENCY")

store = alkstore.connect(os.environ["ALKSTORE_DB"], namespace=os.environ["NOOP_JOBS_NS"])
worker = relay.Worker(store)
_options: dict[str, Any] = {}
if os.environ.get("NOOP_JOBS_CONCURRENCY"):
    _options["concurrency"] = int(os.environ["NOOP_JOBS_CONCURRENCY"])
_starts: list[float] = []  # list.append is atomic: handler threads need no lock


@worker.handler(QUEUE, **_options)
def noop(job: alkstore.Job[dict[str, int]]) -> None:
    now = time.time()
    _starts.append(now)
    if LATENCY is not None and "sample" in job.payload:
        with open(LATENCY, "a") as f:  # one short write(2) on O_APPEND: lines never mix
            f.write(f"{job.payload['sample']} {now!r}\n")


@atexit.register
def _report() -> None:
    if STATS is None:
        return
    starts = list(_starts)
    line = {
        "pid": os.getpid(),
        "count": len(starts),
        "first": min(starts, default=None),
        "last": max(starts, default=None),
    }
    with open(STATS, "a") as f:
        f.write(json.dumps(line) + "\n")
