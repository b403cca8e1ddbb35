"""Cancel by id or by dedupe key (ADR 0022): a waiting job is removed; a running one (with
force) is taken from its holder, whose handler sees it at its next heartbeat, check or
lease renewal; on both engines, through the Queue API and the worker runtime."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import alkstore
import relay
from tests.conftest import Backend


def test_cancel_a_waiting_job_by_its_dedupe_key(store: alkstore.Store) -> None:
    q = store.queue("cancel")
    job_id = q.enqueue({"n": 1}, dedupe_key="report-7", delay=60)
    other = q.enqueue({"n": 2}, dedupe_key="report-8")
    q.cancel(dedupe_key="report-7")
    assert q.get(job_id) is None and q.get(other) is not None
    assert q.enqueue({"n": 3}, dedupe_key="report-7"), "the key is free again"
    with pytest.raises(alkstore.JobNotFound) as missing:
        q.cancel(dedupe_key="nobody")
    assert missing.value.dedupe_key == "nobody" and missing.value.job_id is None
    assert "dedupe_key 'nobody'" in str(missing.value)
    with pytest.raises(alkstore.JobNotFound):
        store.queue("elsewhere").cancel(dedupe_key="report-8")  # keys are per queue
    for bad in ({}, {"job_id": other, "dedupe_key": "report-8"}, {"dedupe_key": ""}):
        with pytest.raises(alkstore.InvalidArgument):
            q.cancel(**bad)
    assert q.get(other) is not None


def test_a_running_job_cancelled_by_key_is_seen_by_its_holder(store: alkstore.Store) -> None:
    q = store.queue("cancel")
    q.enqueue({"n": 1}, dedupe_key="k")
    job = q.claim()
    assert job is not None
    job.check()  # still ours
    with pytest.raises(alkstore.JobRunning):
        q.cancel(dedupe_key="k")
    job.check()
    q.cancel(dedupe_key="k", force=True)
    assert q.get(job.id) is None
    with pytest.raises(alkstore.LeaseLost) as lost:
        job.check()
    assert lost.value.operation == "check" and job.lease_lost
    for finish in (job.heartbeat, job.ack, lambda: job.snooze(1), lambda: job.retry(0)):
        with pytest.raises(alkstore.LeaseLost):
            finish()
    with pytest.raises(alkstore.LeaseLost), job.transaction():
        pass


def test_a_sync_handler_stops_at_its_next_check(backend: Backend) -> None:
    with backend.migrated() as store:
        q = store.queue("cancel")
        q.enqueue({"n": 1}, dedupe_key="long")
        worker = relay.Worker(store, concurrency=1, poll=0.05)
        started = threading.Event()
        stopped: list[str] = []

        @worker.handler("cancel")
        def long(job: alkstore.Job[Any]) -> None:
            started.set()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    job.check()
                except alkstore.LeaseLost:
                    stopped.append("check")
                    raise
                time.sleep(0.01)

        runner = threading.Thread(target=worker.run)
        runner.start()
        try:
            assert started.wait(10)
            q.cancel(dedupe_key="long", force=True)
            deadline = time.monotonic() + 10
            while not stopped and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            worker.stop()
            runner.join(30)
        assert stopped == ["check"]
        assert q.info().running == 0 and q.dead_letters() == [], "gone, not dead-lettered"


def test_an_async_handler_is_cancelled_at_its_next_renewal(backend: Backend) -> None:
    with backend.migrated() as store:
        q = store.queue("cancel")
        q.enqueue({"n": 1}, dedupe_key="async")
        worker = relay.Worker(store, concurrency=1, poll=0.05, visibility=0.3)
        started = threading.Event()
        cancelled = threading.Event()

        @worker.handler("cancel")
        async def long(job: alkstore.Job[Any]) -> None:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        runner = threading.Thread(target=worker.run)
        runner.start()
        try:
            assert started.wait(10)
            q.cancel(dedupe_key="async", force=True)
            assert cancelled.wait(10), "the renewal found the lease gone"
        finally:
            worker.stop()
            runner.join(30)
        assert worker.counters["lease_lost"] == 1
        assert q.info().running == 0 and q.dead_letters() == []
