"""Operating queues from Python (issue 15, docs/adr/0017), on both engines: every queue
with its counts, jobs by state, one job by id, cancel, retry, pause and resume, purge, and
payloads an operator can read without the application's event classes."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

import alkstore
from alkstore import _events
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced


@pytest.fixture
def clock() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture
def ops(backend: Backend, clock: Clock) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock) as store:
        yield store


def _dead(q: alkstore.Queue, payload: object, reason: str) -> int:
    job_id = q.enqueue(payload, max_attempts=1, priority=1000)  # claimed before the others
    job = q.claim()
    assert job is not None and job.id == job_id
    job.fail(reason)
    return job_id


# -- every queue, with its counts ------------------------------------------------------


def test_queues_lists_every_queue_however_it_was_made(ops: alkstore.Store, clock: Clock) -> None:
    """Declared (configure), subscribed, fed only by tx.enqueue, holding only dead letters:
    each appears once, with ready / scheduled / running / dead and the oldest-ready age."""
    ops.queue("declared").configure(max_attempts=3)
    ops.subscribe("subscribed", ["order.*"])
    with ops.transaction() as tx:
        tx.enqueue("enqueued", "a")
        tx.enqueue("enqueued", "b")
        tx.enqueue("enqueued", "later", delay=60)
        tx.enqueue("enqueued", "c")
    _dead(ops.queue("graveyard"), "x", "boom")
    clock.advance(2)
    q = ops.queue("enqueued")
    held = q.claim()  # the oldest ready job: "a"
    assert held is not None and held.payload == "a"
    clock.advance(1)

    found = {info.name: info for info in ops.queues()}
    assert sorted(found) == ["declared", "enqueued", "graveyard", "subscribed"]
    assert found["enqueued"] == alkstore.QueueInfo(
        name="enqueued",
        paused=False,
        ready=2,
        scheduled=1,
        running=1,
        dead=0,
        oldest_ready_age=3.0,
    )
    assert found["graveyard"].dead == 1 and found["graveyard"].ready == 0
    assert found["declared"] == alkstore.QueueInfo(
        name="declared", paused=False, ready=0, scheduled=0, running=0, dead=0
    )
    assert q.info() == found["enqueued"]
    assert [i.name for i in ops.queues()] == sorted(found), "in name order"


# -- pause and resume ------------------------------------------------------------------


def test_pause_stops_claims_everywhere_and_keeps_the_jobs(backend: Backend) -> None:
    with backend.migrated() as admin, backend.migrated() as worker_store:
        ids = admin.queue("mail").enqueue_many(["a", "b", "c"])
        admin.queue("mail").pause()
        mail = worker_store.queue("mail")  # another connection (pool), as a worker has
        assert mail.claim() is None
        assert mail.claim_many(10) == []
        assert mail.claim_many(10, start=0) == [], "prefetching claims nothing either"
        assert mail.claim_many(10, start=4) == []
        info = admin.queue("mail").info()
        assert (info.paused, info.ready) == (True, 3), "the jobs are kept"
        assert mail.next_due() is None, "an idle worker has nothing to wait for"
        assert admin.queue("other").enqueue("o") and worker_store.queue("other").claim()

        admin.queue("mail").resume()
        assert not admin.queue("mail").info().paused
        jobs = mail.claim_many(10)
        assert sorted(j.id for j in jobs) == sorted(i for i in ids if i is not None)


def test_pause_of_an_undeclared_queue_declares_it_with_the_defaults(
    ops: alkstore.Store,
) -> None:
    q = ops.queue("fed.by.tx")
    with ops.transaction() as tx:
        tx.enqueue("fed.by.tx", "x")
    q.pause()
    q.pause()  # idempotent
    assert q.config(refresh=True) == alkstore.QueueConfig()
    assert [(i.name, i.paused) for i in ops.queues()] == [("fed.by.tx", True)]
    q.configure(max_attempts=9)  # configuring keeps the pause
    assert q.info().paused and q.claim() is None
    q.resume()
    assert q.config(refresh=True).max_attempts == 9
    job = q.claim()
    assert job is not None and job.payload == "x"
    ops.queue("never.seen").resume()  # nothing to resume: nothing happens
    assert "never.seen" not in {i.name for i in ops.queues()}


def test_a_paused_queue_keeps_running_jobs_finishable(ops: alkstore.Store) -> None:
    q = ops.queue("work")
    q.enqueue_many(["a", "b"])
    job = q.claim()
    assert job is not None
    q.pause()
    job.ack()  # a job running when the queue was paused finishes as usual
    info = q.info()
    assert (info.ready, info.running, info.paused) == (1, 0, True)


def test_next_due_ignores_a_paused_queue(ops: alkstore.Store, clock: Clock) -> None:
    q = ops.queue("timed")
    q.enqueue("later", delay=30)
    assert q.next_due() == 30.0
    q.pause()
    assert q.next_due() is None
    q.resume()
    assert q.next_due() == 30.0


# -- jobs by state, one by id ----------------------------------------------------------


def test_jobs_lists_by_state(ops: alkstore.Store, clock: Clock) -> None:
    q = ops.queue("mixed")
    ready = q.enqueue("ready")
    scheduled = q.enqueue("scheduled", delay=60)
    running = q.enqueue("running", priority=9)
    expired = q.enqueue("expired", expires=5, delay=10)  # due after its expiry
    claimed = q.claim()
    assert claimed is not None and claimed.id == running
    clock.advance(11)

    assert [(j.id, j.state) for j in q.jobs()] == [
        (ready, "ready"),
        (scheduled, "scheduled"),
        (running, "running"),
        (expired, "expired"),
    ]
    assert [j.id for j in q.jobs(state="ready")] == [ready]
    assert [j.id for j in q.jobs(state="scheduled")] == [scheduled]
    assert [j.id for j in q.jobs(state="running")] == [running]
    assert [j.id for j in q.jobs(limit=2)] == [ready, scheduled]
    assert [j.id for j in q.jobs(after=scheduled)] == [running, expired]
    with pytest.raises(alkstore.InvalidArgument, match="state"):
        q.jobs(state="dead")  # type: ignore[arg-type]
    with pytest.raises(alkstore.InvalidArgument, match="limit"):
        q.jobs(limit=0)


def test_get_shows_a_job_with_its_attempts_wherever_it_is(
    ops: alkstore.Store, clock: Clock
) -> None:
    q = ops.queue("history")
    job_id = q.enqueue(OrderPlaced(order_id=7), max_attempts=3, dedupe_key="o-7", priority=2)
    job = q.claim()
    assert job is not None
    job.retry(delay=30, error="smtp timeout")

    got = q.get(job_id)
    assert isinstance(got, alkstore.JobInfo)
    assert (got.id, got.queue, got.state, got.attempts, got.max_attempts) == (
        job_id,
        "history",
        "scheduled",
        1,
        3,
    )
    assert (got.priority, got.dedupe_key, got.type) == (2, "o-7", "test.order_placed")
    assert [(a.attempt, a.error) for a in got.history] == [(1, "smtp timeout")]
    assert got.last_error == "smtp timeout"
    assert got.visible_at.timestamp() == clock.now + 30
    assert got.payload == OrderPlaced(order_id=7)
    assert ops.job(job_id) == got, "the store finds it without the queue's name"
    assert ops.queue("elsewhere").get(job_id) is None, "a queue finds only its own"
    assert q.get(10**9) is None and ops.job(10**9) is None

    clock.advance(30)
    again = q.claim()
    assert again is not None
    again.fail("bad address")
    dead = q.get(job_id)
    assert isinstance(dead, alkstore.DeadLetter)
    assert (dead.state, dead.reason, dead.attempts) == ("dead", "bad address", 2)
    assert [a.error for a in dead.history] == ["smtp timeout", "bad address"]
    again_dead = ops.job(job_id)
    assert isinstance(again_dead, alkstore.DeadLetter) and again_dead.id == job_id


# -- cancel and retry ------------------------------------------------------------------


def test_cancel_removes_a_waiting_job_and_refuses_a_running_one(ops: alkstore.Store) -> None:
    q = ops.queue("cancel")
    waiting = q.enqueue("w", delay=60, dedupe_key="k")
    running = q.enqueue("r")
    job = q.claim()
    assert job is not None and job.id == running

    q.cancel(waiting)
    assert q.get(waiting) is None
    assert q.enqueue("again", dedupe_key="k"), "the dedupe key is free"
    with pytest.raises(alkstore.JobNotFound):
        q.cancel(waiting)  # already gone
    with pytest.raises(alkstore.JobNotFound):
        ops.queue("other").cancel(running)  # not this queue's

    with pytest.raises(alkstore.JobRunning) as refused:
        q.cancel(running)
    assert refused.value.job_id == running and "force" in str(refused.value)
    assert q.get(running) is not None
    q.cancel(running, force=True)
    assert q.get(running) is None
    with pytest.raises(alkstore.LeaseLost):
        job.ack()  # its holder's ack changes nothing


def test_cancel_refuses_a_dead_letter(ops: alkstore.Store) -> None:
    q = ops.queue("cancel_dead")
    dead = _dead(q, "x", "boom")
    with pytest.raises(alkstore.JobNotFound, match="dead letter"):
        q.cancel(dead)


def test_retry_makes_a_waiting_job_ready_now(ops: alkstore.Store, clock: Clock) -> None:
    q = ops.queue("retry")
    later = q.enqueue("later", delay=3600)
    failed = q.enqueue("failed", max_attempts=3)
    job = q.claim()
    assert job is not None and job.id == failed
    job.retry(delay=600, error="down")
    assert q.claim() is None

    q.retry(later)
    q.retry(failed)
    assert q.get(later).state == "ready"  # type: ignore[union-attr]
    jobs = q.claim_many(5)
    assert sorted(j.id for j in jobs) == sorted([later, failed])
    assert {j.id: j.attempt for j in jobs}[failed] == 2, "a retry keeps the attempts"
    with pytest.raises(alkstore.JobRunning):
        q.retry(failed)
    with pytest.raises(alkstore.JobNotFound):
        q.retry(10**9)


def test_retry_gives_an_expired_job_its_chance(ops: alkstore.Store, clock: Clock) -> None:
    q = ops.queue("retry_expired")
    job_id = q.enqueue("x", expires=5)
    clock.advance(6)
    assert q.get(job_id).state == "expired"  # type: ignore[union-attr]
    q.retry(job_id)
    job = q.claim()
    assert job is not None and job.id == job_id


# -- purge -----------------------------------------------------------------------------


def test_purge_by_state_in_batches(ops: alkstore.Store) -> None:
    q = ops.queue("purge")
    q.enqueue_many(list(range(12)))
    q.enqueue_many(list(range(5)), delay=60)
    running = q.claim()
    assert running is not None
    _dead(q, "d", "boom")
    seen: list[int] = []

    assert q.purge(state="scheduled", batch=2, progress=seen.append) == 5
    assert seen == [2, 4, 5]
    assert q.purge(state="ready", batch=4) == 11
    info = q.info()
    assert (info.ready, info.scheduled, info.running, info.dead) == (0, 0, 1, 1)
    q.enqueue_many(["x", "y"], delay=5)
    q.enqueue("z")
    assert q.purge() == 3, "every waiting job; running ones and dead letters stay"
    assert q.purge(state="dead") == 1
    info = q.info()
    assert (info.ready, info.scheduled, info.running, info.dead) == (0, 0, 1, 0)
    running.ack()
    with pytest.raises(alkstore.InvalidArgument, match="state"):
        q.purge(state="running")  # type: ignore[arg-type]


# -- payloads without the application's classes -----------------------------------------


class Unimported(alkstore.Event, tag="ops.unimported"):
    n: int


def test_raw_payload_reads_without_the_event_class(
    ops: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = ops.queue("raw")
    live = q.enqueue(Unimported(n=1))
    dead = _dead(q, Unimported(n=2), "boom")
    plain = q.enqueue({"a": [1, 2]})
    # As in an operator's process: no class for the tag.
    monkeypatch.setattr(alkstore.Event, "_subclasses", [])
    monkeypatch.setattr(_events, "codec", _events.Codec())

    got = q.get(live)
    tag = {"type": "ops.unimported"}  # the stored JSON: the event's tag and its fields
    assert got is not None and got.raw_payload == {**tag, "n": 1}
    with pytest.raises(alkstore.UnknownEventType):
        _ = got.payload
    (letter,) = q.dead_letters()
    assert letter.id == dead and letter.raw_payload == {**tag, "n": 2}
    assert q.get(plain).raw_payload == {"a": [1, 2]}  # type: ignore[union-attr]
    job = q.claim()
    assert job is not None and job.raw_payload == {**tag, "n": 1}
    job.release()


def test_raw_payload_and_payload_agree_when_the_class_is_there(ops: alkstore.Store) -> None:
    q = ops.queue("both")
    job_id = q.enqueue(OrderPlaced(order_id=3, total_cents=5))
    got = q.get(job_id)
    assert got is not None
    assert (
        got.raw_payload
        == msgspec.to_builtins(got.payload)
        == {
            "type": "test.order_placed",
            "order_id": 3,
            "total_cents": 5,
        }
    )
