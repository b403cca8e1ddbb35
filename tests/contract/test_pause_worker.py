"""A worker on a paused queue idles without spinning, and resume starts it at once
(docs/adr/0017): the pause is the database's, seen by a worker in another thread."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import alkstore
import relay
from tests.conftest import Backend
from tests.worker_support import running, wait_until

IDLE = 60.0  # the worker's poll: never what wakes it here


def test_a_worker_on_a_paused_queue_idles_and_resume_wakes_it(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = 0
    lock = threading.Lock()
    claim_many = alkstore.Queue.claim_many

    def counted(self: alkstore.Queue, *args: Any, **kwargs: Any) -> list[alkstore.Job[Any]]:
        nonlocal claims
        with lock:
            claims += 1
        return claim_many(self, *args, **kwargs)

    monkeypatch.setattr(alkstore.Queue, "claim_many", counted)
    done: list[str] = []
    with backend.migrated() as admin, backend.migrated() as store:
        admin.queue("paused").pause()
        admin.queue("paused").enqueue_many(["a", "b"])
        worker = relay.Worker(store, poll=IDLE, maintenance_every=IDLE)

        @worker.handler("paused")
        def handle(job: alkstore.Job[str]) -> None:
            done.append(job.payload)

        with running(worker):
            time.sleep(0.5)
            assert done == [] and claims <= 4, claims  # a claim per wake, no spinning
            admin.queue("paused").resume()
            wait_until(lambda: sorted(done) == ["a", "b"], "the resumed jobs", 10.0)
