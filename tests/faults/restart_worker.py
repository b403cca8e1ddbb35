"""A worker module for tests/faults/test_pg_restart.py, run as a user runs it:
`python -m relay.cli worker tests.faults.restart_worker:worker --db URL --namespace NS`.

The CLI puts `--db` and `--namespace` in `$ALKSTORE_DB` / `$ALKSTORE_NAMESPACE`
before importing this module, so a plain `alkstore.connect()` finds the database.
The handler appends `"<pid> <job id> <attempt> <position>"` to `$PG_RESTART_STARTED`
when it starts a job and to `$PG_RESTART_FINISHED` when it returns (one short
line per write(2) on an O_APPEND file: lines never interleave). It decodes the
payload as plain JSON, so it needs none of the test's event classes.

Importing this module connects to the database, so nothing but the CLI imports it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import alkstore
import relay

QUEUE = "work"
CONCURRENCY = 4
SLEEP = 0.02  # seconds per job: some handlers are always mid-run when the server dies
STARTED = os.environ["PG_RESTART_STARTED"]
FINISHED = os.environ["PG_RESTART_FINISHED"]

worker = relay.Worker(
    alkstore.connect(connect_timeout=2),
    concurrency=CONCURRENCY,
    poll=0.2,
    grace=10,
)


def _record(path: str, job: alkstore.Job[Any]) -> None:
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {job.id} {job.attempt} {job.position}\n")


@worker.handler(QUEUE, concurrency=CONCURRENCY)
def handle(job: alkstore.Job[dict[str, Any]]) -> None:
    _record(STARTED, job)
    time.sleep(SLEEP)
    _record(FINISHED, job)
