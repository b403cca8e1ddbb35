"""A worker process of the flow-control tests (tests/contract/test_flow_processes.py)
and bench (bench/flow.py): consumes the "flow" queue until the queue is empty, and
writes one line per handler run to a file of its own.

`main(url, namespace, path, concurrency, fail_rate, sample, fed)`; a handler run records
"<key> <seq> <attempt> <ok> <start> <end> <running>": its job's key and sequence
number, the attempt, 1 if it succeeded, its start and end on the machine's monotonic
clock (shared by every process), and how many handlers of the queue were running
then, across every process (the `running` column counts the leases the database
holds, read by the handler itself).
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import alkstore
import relay
from tests import events  # noqa: F401  (the event type the handler decodes)

QUEUE = "flow"


class Failed(Exception):
    """The injected failure of a handler run."""


def fails(key: str, seq: int, attempt: int, rate: float) -> bool:
    """Whether this run fails: a function of the job and the attempt, so a rerun agrees."""
    return random.Random(f"{key}/{seq}/{attempt}").random() < rate


def main(
    url: str,
    namespace: str,
    path: str,
    concurrency: int,
    fail_rate: float,
    sample: bool,
    fed: str,
) -> None:
    """Run until the file `fed` exists (nothing more will be enqueued) and the queue
    stays empty."""
    store = alkstore.connect(url, namespace=namespace)
    worker = relay.Worker(store, concurrency=concurrency, poll=0.1)
    lines: list[str] = []
    lock = threading.Lock()
    queue = store.queue(QUEUE)

    @worker.handler(QUEUE, concurrency=concurrency)
    def handle(job: alkstore.Job[Any]) -> None:
        start = time.monotonic()
        running = queue.stats().active if sample else 0
        seq = int(job.raw_payload["seq"])
        ok = not fails(str(job.key), seq, job.attempt, fail_rate)
        time.sleep(0.001)
        end = time.monotonic()
        with lock:
            lines.append(f"{job.key} {seq} {job.attempt} {int(ok)} {start} {end} {running}\n")
        if not ok:
            raise Failed(f"injected failure of {job.key}/{seq}")

    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    quiet = 0
    empty = alkstore.QueueStats(0, 0, 0, 0, None)
    while quiet < 5:  # empty five looks in a row once fed: every process is done
        time.sleep(0.1)
        quiet = quiet + 1 if os.path.exists(fed) and queue.stats() == empty else 0
    worker.stop()
    thread.join(60)
    with open(path, "w") as f:
        f.writelines(lines)
    store.close()
