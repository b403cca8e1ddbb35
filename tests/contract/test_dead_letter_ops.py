"""Dead letters as an operator handles them (issue 15, docs/adr/0017), on both engines:
listed and counted by when they died and by their error, requeued and purged in batched
transactions, so that an interrupted bulk operation loses and duplicates nothing and
running it again finishes it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend


@pytest.fixture
def clock() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture
def ops(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock) as store:
        yield store


def bury(q: alkstore.Queue, reasons: list[str]) -> list[int]:
    """One dead letter per reason, in order, each with its own id."""
    ids = q.enqueue_many(list(range(len(reasons))), max_attempts=1)
    jobs = {job.id: job for job in q.claim_many(len(reasons))}
    for job_id, reason in zip(ids, reasons, strict=True):
        jobs[job_id].fail(reason)
    return [i for i in ids if i is not None]


class Interrupted(Exception):
    pass


def test_dead_letters_filtered_by_time_and_error(ops: alkstore.Store, clock: Clock) -> None:
    q = ops.queue("mail")
    old = bury(q, ["smtp timeout", "bad address"])
    clock.advance(3600)
    since = clock.now
    new = bury(q, ["smtp timeout after 30s", "SMTP TIMEOUT", "quota"])

    assert [d.id for d in q.dead_letters(since=since)] == new
    assert [d.id for d in q.dead_letters(since=datetime.fromtimestamp(since, UTC))] == new
    assert [d.id for d in q.dead_letters(error="timeout")] == [old[0], new[0]]
    assert [d.id for d in q.dead_letters(error="(?i)timeout")] == [old[0], new[0], new[1]]
    assert [d.id for d in q.dead_letters(error="timeout", since=since)] == [new[0]]
    assert [d.id for d in q.dead_letters(error="(?i)timeout", limit=2)] == [old[0], new[0]]
    assert q.count_dead() == 5
    assert q.count_dead(since=since) == 3 and q.count_dead(error="^quota$") == 1
    with pytest.raises(alkstore.InvalidArgument, match="error"):
        q.dead_letters(error="(unclosed")


def test_requeue_by_filter_in_batches(ops: alkstore.Store, clock: Clock) -> None:
    q = ops.queue("mail")
    kept = bury(q, ["bad address"])
    clock.advance(10)
    back = bury(q, ["smtp timeout"] * 7)
    seen: list[int] = []
    assert q.requeue(error="timeout", batch=3, progress=seen.append) == 7
    assert seen == [3, 6, 7]
    assert [d.id for d in q.dead_letters()] == kept
    assert sorted(j.id for j in q.jobs(state="ready")) == back
    assert q.requeue(error="timeout", batch=3) == 0, "again: nothing left to do"


def test_an_interrupted_bulk_requeue_loses_nothing_and_duplicates_nothing(
    ops: alkstore.Store,
) -> None:
    q = ops.queue("bulk")
    ids = bury(q, ["boom"] * 12)
    batches: list[int] = []

    def stop_after_first(done: int) -> None:
        batches.append(done)
        raise Interrupted

    with pytest.raises(Interrupted):
        q.requeue(batch=5, progress=stop_after_first)
    assert batches == [5]
    live = {j.id for j in q.jobs()}
    dead = {d.id for d in q.dead_letters()}
    assert len(live) == 5 and len(dead) == 7
    assert live | dead == set(ids) and not live & dead

    assert q.requeue(batch=5) == 7, "running it again does the rest"
    assert sorted(j.id for j in q.jobs()) == ids and q.dead_letters() == []
    assert q.requeue(batch=5) == 0


def test_requeue_takes_only_what_was_dead_when_it_started(ops: alkstore.Store) -> None:
    """A job that dies again while a bulk requeue runs stays dead: the run never loops."""
    q = ops.queue("loop")
    bury(q, ["boom"] * 6)

    def fail_what_came_back(done: int) -> None:
        for job in q.claim_many(10):
            job.fail("boom again")

    assert q.requeue(batch=2, progress=fail_what_came_back) == 6
    assert {d.reason for d in q.dead_letters()} == {"boom again"}


def test_requeue_by_ids_and_purge_by_ids(ops: alkstore.Store) -> None:
    q = ops.queue("ids")
    a, b, c = bury(q, ["x", "y", "z"])
    assert q.requeue([a, 10**9]) == 1
    assert q.purge_dead([b, a]) == 1, "a is not dead any more"
    assert [d.id for d in q.dead_letters()] == [c]


def test_purge_by_filter_in_batches_is_idempotent(ops: alkstore.Store, clock: Clock) -> None:
    q = ops.queue("purge")
    keep = bury(q, ["quota"])
    clock.advance(60)
    bury(q, ["boom"] * 5 + ["quota"])
    since = clock.now
    seen: list[int] = []
    assert q.purge_dead(since=since, error="boom", batch=2, progress=seen.append) == 5
    assert seen == [2, 4, 5]
    assert q.purge_dead(since=since, error="boom", batch=2) == 0
    assert q.count_dead() == 2
    assert q.purge_dead("all", since=since) == 1
    assert [d.id for d in q.dead_letters()] == keep
    clock.advance(100)
    assert q.purge_dead(older_than=50, batch=1) == 1
    with pytest.raises(alkstore.InvalidArgument):
        q.purge_dead()


def test_an_interrupted_bulk_purge_can_run_again(ops: alkstore.Store) -> None:
    q = ops.queue("purge_stop")
    bury(q, ["boom"] * 7)

    def stop(done: int) -> None:
        raise Interrupted

    with pytest.raises(Interrupted):
        q.purge_dead("all", batch=3, progress=stop)
    assert q.count_dead() == 4
    assert q.purge_dead("all", batch=3) == 4 and q.count_dead() == 0
