"""A worker module for tests/acceptance/test_cli_queue_names.py: handlers for queues whose
names are values (`email.send`, `billing-v2`), run as `python -m relay.cli worker
tests.acceptance.named_queue_jobs:worker`. The test's environment names the database
(`ALKSTORE_DB`) and namespace (`ALKSTORE_TEST_NS`); importing this module connects."""

from __future__ import annotations

import os

import alkstore
import relay

worker = relay.Worker(
    alkstore.connect(os.environ["ALKSTORE_DB"], namespace=os.environ["ALKSTORE_TEST_NS"]),
    poll=0.2,
)


@worker.handler("email.send")
def send(job: alkstore.Job[object]) -> None:
    pass


@worker.handler("billing-v2")
def bill(job: alkstore.Job[object]) -> None:
    pass
