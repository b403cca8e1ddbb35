"""A worker module for the kill -9 test of transactional ack (tests/faults/test_tx_ack_kill.py).

Run as a user runs it: `python -m relay.cli worker tests.faults.txack_jobs:worker --db URL`,
with `ALKSTORE_TEST_NS` (the namespace) and `TXACK_STARTED` (a file the handler appends
"<job id>" lines to when it enters its block) in the environment. Each job writes its
business row, enqueues a follow-up and sleeps a few milliseconds inside
`job.transaction()`, so a SIGKILL often lands between the writes and COMMIT.

Importing this module connects to the database, so nothing but the CLI imports it.
"""

from __future__ import annotations

import os
import random
import time

import alkstore
import relay
from tests.business import Business

QUEUE = "txack"
STARTED = os.environ["TXACK_STARTED"]

store = alkstore.connect(os.environ["ALKSTORE_DB"], namespace=os.environ["ALKSTORE_TEST_NS"])
business = Business(store)
worker = relay.Worker(store, concurrency=4, visibility=1.0, poll=0.2)


@worker.handler(QUEUE, concurrency=4)
def handle(job: alkstore.Job[dict[str, int]]) -> None:
    with job.transaction() as tx:
        with open(STARTED, "a") as f:
            f.write(f"{job.id}\n")
        business.write(tx, job.id)
        tx.enqueue("follow", {"job": job.id})
        time.sleep(random.uniform(0, 0.02))
