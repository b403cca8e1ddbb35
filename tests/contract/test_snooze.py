"""Snooze (ADR 0022): a job goes back to waiting for a while without counting the attempt,
from the plain Queue API (`job.snooze`) and from a handler (`raise relay.Snooze(s)`)."""

from __future__ import annotations

from typing import Any

import pytest

import alkstore
import relay
from tests.clock import Clock
from tests.conftest import Backend
from tests.contract.test_async_store import arun


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cstore(backend: Backend, clock: Clock) -> Any:
    with backend.migrated(clock=clock) as store:
        yield store


def test_a_snoozed_job_waits_and_keeps_its_attempt_count(
    cstore: alkstore.Store, clock: Clock
) -> None:
    q = cstore.queue("snooze")
    q.configure(max_attempts=2)
    job_id = q.enqueue({"n": 1})
    for _ in range(5):  # more snoozes than attempts: none of them counts
        job = q.claim()
        assert job is not None and job.id == job_id and job.attempt == 1
        job.snooze(30)
        info = q.get(job_id)
        assert isinstance(info, alkstore.JobInfo)
        assert (info.state, info.attempts, info.history) == ("scheduled", 0, [])
        assert info.visible_at.timestamp() == pytest.approx(clock() + 30, abs=0.002)
        assert q.claim() is None, "not before its time"
        clock.ms += 30_000
    job = q.claim()
    assert job is not None and job.attempt == 1
    job.retry(delay=0, error="a real failure")  # a failure still counts
    job = q.claim()
    assert job is not None and job.attempt == 2
    job.snooze(0)
    job = q.claim()
    assert job is not None and job.attempt == 2, "still the second attempt"


def test_a_stale_holder_cannot_snooze(cstore: alkstore.Store, clock: Clock) -> None:
    q = cstore.queue("snooze")
    q.enqueue({"n": 1})
    stale = q.claim(visibility=1)
    assert stale is not None
    clock.ms += 2_000
    fresh = q.claim()
    assert fresh is not None
    with pytest.raises(alkstore.LeaseLost) as lost:
        stale.snooze(10)
    assert lost.value.operation == "snooze"
    info = q.get(fresh.id)
    assert isinstance(info, alkstore.JobInfo) and info.state == "running"


def test_snooze_refuses_a_bad_delay(cstore: alkstore.Store) -> None:
    q = cstore.queue("snooze")
    q.enqueue({"n": 1})
    job = q.claim()
    assert job is not None
    for bad in (-1, float("nan"), "5"):
        with pytest.raises(alkstore.InvalidArgument):
            job.snooze(bad)  # type: ignore[arg-type]
        with pytest.raises(alkstore.InvalidArgument):
            relay.Snooze(bad)  # type: ignore[arg-type]
    with pytest.raises(alkstore.InvalidArgument):
        relay.Snooze(float("inf"))
    info = q.get(job.id)
    assert isinstance(info, alkstore.JobInfo) and info.state == "running", "nothing changed"


def test_a_handler_snoozes_with_relay_snooze(backend: Backend) -> None:
    with backend.migrated() as store:
        q = store.queue("snooze")
        q.configure(max_attempts=1)  # a counted snooze would bury the job at once
        job_id = q.enqueue({"n": 1})
        worker = relay.Worker(store, concurrency=1, poll=0.05)
        seen: list[int] = []

        @worker.handler("snooze")
        def handle(job: alkstore.Job[Any]) -> None:
            seen.append(job.attempt)
            if len(seen) < 3:
                raise relay.Snooze(0.02)

        while store.job(job_id) is not None:
            worker.run(once=True)
        assert seen == [1, 1, 1]
        assert worker.counters["snoozed"] == 2 and worker.counters["ack"] == 1
        assert q.dead_letters() == []


def test_the_async_job_snoozes_and_checks(backend: Backend) -> None:
    async def body(store: alkstore.AsyncStore) -> None:
        q = store.queue("snooze")
        await q.enqueue({"n": 1}, dedupe_key="k", delay=5)
        assert await q.enqueue({"n": 2}, dedupe_key="k", on_duplicate="replace") > 0
        job = await q.claim()
        assert job is not None and job.attempt == 1 and job.raw_payload == {"n": 2}
        await job.check()
        await job.snooze(0)
        with pytest.raises(alkstore.LeaseLost):
            await job.check()
        job = await q.claim()
        assert job is not None and job.attempt == 1, "the snooze did not count"

    arun(backend, body)
