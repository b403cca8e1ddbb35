"""`group=` on every direct producing path (docs/adr/0021, addendum 2026-12-01): bulk
`enqueue_many(..., group=)` and `JobSpec(group=)` order a batch's jobs by key in an
ordered queue exactly as one `enqueue(group=)` per job would, on both bulk paths (the
engine's bulk insert and one INSERT per job); and a replacing (debouncing) enqueue with
a group keeps its key's order. Both engines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import alkstore
from alkstore import JobSpec
from tests.clock import Clock
from tests.conftest import Backend

COLUMNS = "key, grp, held_due, visible_at, dedupe_key, payload"


@pytest.fixture
def clock() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture(params=["bulk", "single"])
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gstore(backend: Backend, clock: Clock, path: str) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock) as store:
        store.engine.bulk_min = 1 if path == "bulk" else 1_000_000  # type: ignore[misc]
        yield store


def rows(backend: Backend, store: alkstore.Store, queue: str) -> list[tuple[Any, ...]]:
    """The ordering columns of a queue's jobs, in id order."""
    if backend.name == "postgres":
        table = f"{backend.namespace}.jobs"
        query = f"SELECT {COLUMNS.replace('payload', 'payload::text')} FROM {table} "
        query += "WHERE queue = %s ORDER BY id"
    else:
        query = f"SELECT {COLUMNS} FROM {backend.namespace}__jobs WHERE queue = ? ORDER BY id"
    with store.transaction() as tx:
        return [tuple(row) for row in tx.connection.execute(query, (queue,)).fetchall()]


def drain(q: alkstore.Queue) -> list[list[tuple[str | None, Any]]]:
    """What each claim_many(10) hands out, acking it all before the next."""
    rounds = []
    while jobs := q.claim_many(10):
        rounds.append(sorted(((j.key, j.raw_payload) for j in jobs), key=repr))
        assert q.ack_many(jobs) == []
    return rounds


def test_a_batch_with_one_group_is_handed_out_one_at_a_time(gstore: alkstore.Store) -> None:
    q = gstore.queue("ordered")
    q.configure(ordered=True)
    ids = q.enqueue_many([1, 2, 3], group="order-42")
    assert len(ids) == 3
    assert drain(q) == [[("order-42", 1)], [("order-42", 2)], [("order-42", 3)]]


def test_per_job_groups_interleave_and_keep_each_keys_order(gstore: alkstore.Store) -> None:
    q = gstore.queue("ordered")
    q.configure(ordered=True)
    q.enqueue_many(
        [
            JobSpec("x1", group="x"),
            JobSpec("y1", group="y"),
            "y-default",  # the batch's group
            JobSpec("x2", group="x"),
            JobSpec("y2", group="y"),
            JobSpec("z1", group="z", delay=5),
        ],
        group="y",  # the batch's default, which a JobSpec's own group overrides
    )
    assert drain(q) == [
        [("x", "x1"), ("y", "y1")],
        [("x", "x2"), ("y", "y-default")],
        [("y", "y2")],
    ]


def test_a_batch_queues_behind_the_keys_live_jobs(gstore: alkstore.Store) -> None:
    q = gstore.queue("ordered")
    q.configure(ordered=True)
    q.enqueue("first", group="k")
    q.enqueue_many(["second", "third"], group="k")
    assert drain(q) == [[("k", "first")], [("k", "second")], [("k", "third")]]


def test_rows_are_what_one_enqueue_per_job_writes(
    backend: Backend, gstore: alkstore.Store, clock: Clock
) -> None:
    for name in ("bulk", "one"):
        gstore.queue(name).configure(ordered=True)
    gstore.queue("one").enqueue("live", group="a")
    gstore.queue("bulk").enqueue("live", group="a")
    batch: list[Any] = [
        JobSpec("a1", group="a", delay=3),
        JobSpec("b1", group="b", dedupe_key="d"),
        "plain",
        JobSpec("b2", group="b", delay=7),
    ]
    gstore.queue("bulk").enqueue_many(batch)
    one = gstore.queue("one")
    for item in batch:
        if isinstance(item, JobSpec):
            own = {f: getattr(item, f) for f in item.__struct_fields__[1:]}
            one.enqueue(item.payload, **{f: v for f, v in own.items() if v is not None})
        else:
            one.enqueue(item)
    assert rows(backend, gstore, "bulk") == rows(backend, gstore, "one")
    states = [i.state for i in gstore.queue("bulk").jobs()]
    assert states == ["ready", "held", "ready", "ready", "held"]


def test_an_unordered_queue_keeps_the_group_as_the_jobs_key(gstore: alkstore.Store) -> None:
    q = gstore.queue("plain")
    q.enqueue_many([1, JobSpec(2, group="other")], group="g")
    jobs = q.claim_many(10)
    assert sorted((j.key, j.raw_payload) for j in jobs) == [("g", 1), ("other", 2)]


def test_a_bad_group_raises_before_anything_is_written(gstore: alkstore.Store) -> None:
    q = gstore.queue("ordered")
    for bad in ("", "a\x00b", 5):
        with pytest.raises(alkstore.InvalidArgument):
            q.enqueue_many([1, 2], group=bad)
        with pytest.raises(alkstore.InvalidArgument):
            q.enqueue_many([1, JobSpec(2, group=bad)])  # type: ignore[arg-type]
    assert q.jobs() == []


def test_replacing_a_held_job_keeps_it_behind_its_head(
    gstore: alkstore.Store, clock: Clock
) -> None:
    """Debounce in an ordered queue: the replaced job keeps its id and its place."""
    q = gstore.queue("ordered")
    q.configure(ordered=True)
    head = q.enqueue("head", group="k")
    held = q.enqueue("v1", group="k", dedupe_key="doc", on_duplicate="replace")
    for items in (["v2"], ["v3"]):
        ids = q.enqueue_many(items, group="k", dedupe_key="doc", delay=2, on_duplicate="replace")
        assert ids == [held]
    assert [(i.id, i.state) for i in q.jobs()] == [(head, "ready"), (held, "held")]
    assert q.get(held).visible_at.timestamp() == clock() + 2  # type: ignore[union-attr]
    assert drain(q) == [[("k", "head")]]
    clock.advance(2)
    assert drain(q) == [[("k", "v3")]]


def test_replacing_with_a_group_orders_a_new_job(gstore: alkstore.Store) -> None:
    q = gstore.queue("ordered")
    q.configure(ordered=True)
    q.enqueue("head", group="k")
    q.enqueue_many(["new"], group="k", dedupe_key="doc", on_duplicate="replace")
    q.enqueue("direct", group="k", dedupe_key="doc2", on_duplicate="replace")
    assert drain(q) == [[("k", "head")], [("k", "new")], [("k", "direct")]]
