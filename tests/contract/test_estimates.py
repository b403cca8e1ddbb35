"""Queue counts estimated at scale (docs/adr/0023), on both engines: below the threshold
`estimate=True` counts exactly; above it (forced here with a threshold of 0) running jobs,
the oldest ready job and the queue names stay exact and ready / scheduled / dead are the
planner's estimates on PostgreSQL and counts of the indexes alone on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import alkstore
from alkstore import _estimates
from tests.clock import Clock
from tests.conftest import Backend


@pytest.fixture
def clock() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture
def est(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock) as store:
        yield store


def _fill(store: alkstore.Store, clock: Clock) -> None:
    emails = store.queue("emails")
    emails.enqueue_many([{"n": i} for i in range(40)])
    emails.enqueue_many([{"n": i} for i in range(10)], delay=3600)
    emails.enqueue({"n": "urgent"}, priority=9)
    clock.advance(5)
    emails.enqueue({"n": "late"})
    for _ in range(3):
        job = emails.claim()
        assert job is not None
    mail = store.queue("mail")
    for i in range(4):
        mail.enqueue({"n": i}, max_attempts=1)
        job = mail.claim()
        assert job is not None
        job.fail("smtp")
    store.queue("idle").pause()


def test_below_the_threshold_estimate_counts_exactly(est: alkstore.Store, clock: Clock) -> None:
    _fill(est, clock)
    assert est.queues(estimate=True) == est.queues()
    assert est.queue("emails").info(estimate=True) == est.queue("emails").info()
    assert not est.queue("emails").info(estimate=True).estimated
    status = est.status(queues=False)
    assert status.queues == [] and status.head == est.log.head()
    assert [q.name for q in est.status().queues] == [q.name for q in est.queues()]


def test_above_it_running_oldest_and_names_stay_exact(
    est: alkstore.Store, clock: Clock, backend: Backend
) -> None:
    _fill(est, clock)
    if backend.name == "postgres":
        with backend.raw_connection() as conn:
            conn.execute(f"ANALYZE {est.namespace}.jobs, {est.namespace}.dead_letters")
    estimator = _estimates.Estimator(est.engine, est._runtime, threshold=0)
    assert estimator.active
    exact = {q.name: q for q in est.queues()}
    assert [n for n, _ in estimator.names()] == list(exact)
    assert dict(estimator.names())["idle"] is True
    for name, want in exact.items():
        paused, ready, scheduled, running, dead, oldest_ms = estimator.counts(name)
        assert (paused, running) == (want.paused, want.running)
        age = None if oldest_ms is None else oldest_ms / 1000
        assert age == want.oldest_ready_age
        if backend.name == "sqlite":
            assert (ready, scheduled, dead) == (want.ready, want.scheduled, want.dead)
        else:  # the planner's figures, from fresh statistics: near the truth
            assert abs(ready - want.ready) <= max(3, want.ready // 5)
            assert abs(scheduled - want.scheduled) <= max(3, want.scheduled // 5)
            assert abs(dead - want.dead) <= max(2, want.dead // 5)
    assert exact["emails"].running == 3 and exact["emails"].oldest_ready_age == 5.0


def test_a_state_lists_what_the_unfiltered_list_holds_in_it(
    est: alkstore.Store, clock: Clock
) -> None:
    _fill(est, clock)
    emails = est.queue("emails")
    emails.enqueue({"n": "expires"}, expires=1)
    emails.enqueue({"n": "exhausted"}, max_attempts=1, priority=20)
    job = emails.claim(visibility=1)
    assert job is not None and job.payload == {"n": "exhausted"}
    clock.advance(2)  # one lapsed with no attempt left (running until the sweep buries it),
    # the other expired unclaimed
    everything = emails.jobs(limit=1_000)
    states = {j.state for j in everything}
    assert states == {"ready", "scheduled", "running", "expired"}
    for name in sorted(states):
        state: Any = name
        want = [j.id for j in everything if j.state == state]
        assert [j.id for j in emails.jobs(state=state, limit=1_000)] == want, state
        if len(want) > 1:  # paged by id
            first = emails.jobs(state=state, limit=1)
            rest = emails.jobs(state=state, limit=1_000, after=first[0].id)
            assert [j.id for j in first + rest] == want
