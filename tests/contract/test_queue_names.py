"""Queue names are values, not identifiers (issue 14; docs/adr/0006, addendum 2026-12-01):
`email.send`, `billing-v2`, `tenant/x`, `urn:jobs:a` work end to end on both engines;
empty names, whitespace, control characters and over-long names are refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import alkstore
import relay
from alkstore import JobSpec
from tests.conftest import Backend
from tests.events import OrderPlaced

GOOD = ["email.send", "billing-v2", "tenant/x", "urn:jobs:a", "Mixed.Case_1", "9lives", "q" * 200]
BAD = [
    "",
    " ",
    "a b",
    " lead",
    "trail ",
    "tab\there",
    "new\nline",
    "nul\x00",
    "a,b",  # `alkstore worker --queues a,b` splits on commas
    "-flag",  # would read as an option on the command line
    ".hidden",
    "/abs",
    "x;drop",
    "quo'te",
    "é",
    "q" * 201,
    None,
    5,
]


@pytest.fixture
def nstore(backend: Backend) -> Iterator[alkstore.Store]:
    with backend.migrated() as store:
        yield store


@pytest.mark.parametrize("name", GOOD)
def test_a_wide_name_works_for_every_queue_operation(nstore: alkstore.Store, name: str) -> None:
    q = nstore.queue(name)
    assert q.name == name
    q.configure(max_attempts=2, visibility=30)
    listener = nstore.listen()
    first = q.enqueue({"n": 1})
    assert listener.wait(10)  # the wake fires for a commit to this queue
    with nstore.transaction() as tx:
        tx.enqueue(name, {"n": 2}, dedupe_key="two")
    q.enqueue_many([{"n": 3}, JobSpec({"n": 4}, priority=-1)])
    q.enqueue_many([{"n": n} for n in range(5, 45)])  # the bulk path
    assert q.stats().ready == 44
    job = q.claim()
    assert job is not None and job.id == first and job.queue == name
    job.fail("no")
    (dead,) = q.dead_letters()
    assert (dead.queue, dead.payload, dead.reason) == (name, {"n": 1}, "no")
    assert q.requeue() == 1
    jobs = q.claim_many(100)
    assert sorted(job.payload["n"] for job in jobs) == list(range(1, 45))
    assert q.ack_many(jobs) == []
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)
    assert q.config().max_attempts == 2


@pytest.mark.parametrize("name", GOOD)
def test_a_wide_name_is_fed_by_the_relay_and_drained_by_a_worker(
    nstore: alkstore.Store, name: str
) -> None:
    nstore.subscribe(name, ["test.*"], start="beginning")
    nstore.subscribe("other", ["test.*"], start="beginning")
    with nstore.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=n) for n in range(3)])
    assert nstore.relay_batch() == (6, 3)
    assert {s.queue for s in nstore.subscriptions()} == {name, "other"}
    assert {lag.queue: lag.events for lag in nstore.status().subscriptions} == {
        name: 0,
        "other": 0,
    }
    seen: list[int] = []
    worker = relay.Worker(nstore, poll=0.1)

    @worker.handler(name)
    def handle(job: alkstore.Job[OrderPlaced]) -> None:
        seen.append(job.payload.order_id)

    worker.run(queues=[name], once=True)
    assert sorted(seen) == [0, 1, 2]
    nstore.replay(name, 2)
    assert nstore.relay_batch() == (2, 2)
    assert nstore.unsubscribe(name)
    assert nstore.queue("other").stats().ready == 3


@pytest.mark.parametrize("name", BAD)
def test_a_bad_name_is_refused_before_anything_is_written(
    nstore: alkstore.Store, name: object
) -> None:
    with pytest.raises(alkstore.InvalidName) as info:
        nstore.queue(name)  # type: ignore[arg-type]
    assert info.value.kind == "queue"
    with pytest.raises(alkstore.InvalidName), nstore.transaction() as tx:
        tx.enqueue(name, "x")  # type: ignore[call-overload]
    with pytest.raises(alkstore.InvalidName), nstore.transaction() as tx:
        tx.enqueue(name, "x", priority=1)  # type: ignore[call-overload]
    with pytest.raises(alkstore.InvalidName):
        nstore.subscribe(name, ["*"])  # type: ignore[arg-type]
    with pytest.raises(alkstore.InvalidName):
        relay.Worker(nstore).handler(name)  # type: ignore[arg-type]
    assert nstore.subscriptions() == []
