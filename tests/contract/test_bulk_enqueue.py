"""Bulk enqueue (ADR 0013) on both engines: `enqueue_many` with per-job options.

Each semantic test runs on both paths: `bulk` (the engine's bulk insert: COPY on
PostgreSQL, one executemany on SQLite) and `single` (one INSERT per job, what a batch
smaller than the engine's `bulk_min` takes); both must do exactly what one
`enqueue` per job, in input order, in one transaction, would do.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import alkstore
from alkstore import JobSpec
from alkstore.postgres import _conn
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced

COLUMNS = (
    "queue, priority, visible_at, enqueued_at, expires_at, attempts, max_attempts, backoff, "
    "dedupe_key, type, key, position, headers, payload, history"
)


@pytest.fixture
def clock() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture(params=["bulk", "single"])
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def bstore(backend: Backend, clock: Clock, path: str) -> Iterator[alkstore.Store]:
    with backend.migrated(clock=clock, max_payload_bytes=4096) as store:
        store.engine.bulk_min = 1 if path == "bulk" else 1_000_000  # type: ignore[misc]
        yield store


def jobs(backend: Backend, store: alkstore.Store, queue: str) -> list[tuple[Any, ...]]:
    """Every column but the id of a queue's jobs, in id order, as the database holds them."""
    if backend.name == "postgres":
        table = f"{backend.namespace}.jobs"
        columns = COLUMNS.replace("backoff", "backoff::text").replace(
            "headers, payload, history", "headers::text, payload::text, history::text"
        )
        query = f"SELECT {columns} FROM {table} WHERE queue = %s ORDER BY id"
    else:
        query = f"SELECT {COLUMNS} FROM {backend.namespace}__jobs WHERE queue = ? ORDER BY id"
    with store.transaction() as tx:
        return [tuple(row) for row in tx.connection.execute(query, (queue,)).fetchall()]


def ints(ids: list[int | None]) -> list[int]:
    """The ids of a batch without ignored duplicates, checked increasing (input order)."""
    assert all(isinstance(i, int) for i in ids)
    checked = [i for i in ids if i is not None]
    assert checked == sorted(set(checked))
    return checked


def specs() -> list[Any]:
    """A batch that uses every option, per job and mixed with plain payloads."""
    return [
        JobSpec({"n": 0}, delay=2.5, priority=3, dedupe_key="a", max_attempts=2),
        {"n": 1},
        JobSpec(OrderPlaced(order_id=2), run_at=1_700_000_100.0, headers={"trace": "t2"}),
        JobSpec({"n": 3}, expires=60, backoff=alkstore.Fixed(7)),
        JobSpec(
            "four",
            expires=datetime.fromtimestamp(1_700_000_500, UTC),
            run_at=datetime.fromtimestamp(1_700_000_010, UTC),
            priority=-1,
        ),
        JobSpec([5], dedupe_key="b"),
    ]


def test_rows_are_what_one_enqueue_per_job_writes(backend: Backend, bstore: alkstore.Store) -> None:
    q = bstore.queue("bulk")
    ids = q.enqueue_many(specs(), priority=1, headers={"from": "batch"}, max_attempts=4)
    one = bstore.queue("one")
    for item in specs():
        shared: dict[str, Any] = {"priority": 1, "headers": {"from": "batch"}, "max_attempts": 4}
        if isinstance(item, JobSpec):
            own = {f: getattr(item, f) for f in item.__struct_fields__[1:]}
            own = {f: v for f, v in own.items() if v is not None}
            one.enqueue(item.payload, **{**shared, **own})
        else:
            one.enqueue(item, **shared)
    ints(ids)
    ours, theirs = jobs(backend, bstore, "bulk"), jobs(backend, bstore, "one")
    assert [row[1:] for row in ours] == [row[1:] for row in theirs]  # all but the queue


def test_per_job_options_are_honoured(bstore: alkstore.Store, clock: Clock) -> None:
    q = bstore.queue("opts")
    q.configure(max_attempts=9)
    ids = q.enqueue_many(specs())
    now = q.claim_many(10)
    assert [(j.id, j.max_attempts) for j in now] == [(ids[1], 9), (ids[3], 9), (ids[5], 9)]
    assert q.ack_many(now) == []
    clock.advance(2.5)
    job = q.claim()
    assert job is not None and (job.id, job.priority, job.max_attempts) == (ids[0], 3, 2)
    job.ack()
    clock.advance(7.5)
    later = q.claim_many(10)
    assert [(j.id, j.priority, j.payload) for j in later] == [(ids[4], -1, "four")]
    assert q.ack_many(later) == []
    clock.advance(90)
    job = q.claim()
    assert job is not None and job.id == ids[2]
    assert (job.payload, job.headers) == (OrderPlaced(order_id=2), {"trace": "t2"})


def test_shared_options_and_job_options_combine(bstore: alkstore.Store, clock: Clock) -> None:
    q = bstore.queue("mixed")
    ids = q.enqueue_many([1, JobSpec(2, delay=0), JobSpec(3, priority=5)], delay=10)
    assert [j.id for j in q.claim_many(5)] == [ids[1]]  # only the one that set its delay
    clock.advance(10)
    assert [j.id for j in q.claim_many(5)] == [ids[2], ids[0]]  # priority 5 first


def test_ids_are_in_input_order(bstore: alkstore.Store) -> None:
    q = bstore.queue("order")
    ids = q.enqueue_many([JobSpec(n, dedupe_key=f"k{n}") if n % 2 else n for n in range(50)])
    assert len(ints(ids)) == 50
    assert [(j.id, j.payload) for j in q.claim_many(50)] == list(zip(ids, range(50), strict=True))


def test_duplicate_keys_raise_and_write_nothing(bstore: alkstore.Store) -> None:
    q = bstore.queue("dupes")
    live = q.enqueue("live", dedupe_key="live")
    batch = [JobSpec(1, dedupe_key="x"), JobSpec(2, dedupe_key="x"), JobSpec(3, dedupe_key="live")]
    with pytest.raises(alkstore.DuplicateJob) as info:
        q.enqueue_many(batch)  # the first duplicate in input order is named: "x", in-batch
    assert (info.value.queue, info.value.key) == ("dupes", "x")
    with pytest.raises(alkstore.DuplicateJob) as info:
        q.enqueue_many([JobSpec(0), JobSpec(1, dedupe_key="live"), JobSpec(2, dedupe_key="y")])
    assert info.value.key == "live"
    with pytest.raises(alkstore.DuplicateJob) as info:
        q.enqueue_many(["a", "b"], dedupe_key="shared")  # a shared key: the second is a dupe
    assert info.value.key == "shared"
    assert [j.id for j in q.claim_many(10)] == [live], "a batch that raised wrote nothing"


def test_duplicate_keys_ignored_in_input_order(bstore: alkstore.Store) -> None:
    q = bstore.queue("ignored")
    live = q.enqueue("live", dedupe_key="live")
    batch = [
        JobSpec(0, dedupe_key="live"),
        JobSpec(1, dedupe_key="x"),
        JobSpec(2),
        JobSpec(3, dedupe_key="x"),
        JobSpec(4, dedupe_key="y"),
        JobSpec(5, dedupe_key="live"),
    ]
    ids = q.enqueue_many(batch, on_duplicate="ignore")
    assert [i is not None for i in ids] == [False, True, True, False, True, False]
    got = [(j.id, j.payload) for j in q.claim_many(10)]
    assert got == [(live, "live")] + [(ids[n], n) for n in (1, 2, 4)]
    for job in q.claim_many(10) or []:
        job.ack()
    assert q.enqueue_many(["again"], dedupe_key="y", on_duplicate="ignore") == [None]


def test_keys_free_again_once_acked(bstore: alkstore.Store) -> None:
    q = bstore.queue("free")
    q.enqueue_many(["a", "b"], dedupe_key="k", on_duplicate="ignore")
    job = q.claim()
    assert job is not None
    job.ack()
    assert None not in q.enqueue_many([JobSpec("c", dedupe_key="k"), "d"])


def test_bad_input_raises_before_anything_is_written(bstore: alkstore.Store) -> None:
    q = bstore.queue("bad")
    bad: list[tuple[Any, type[Exception]]] = [
        (JobSpec(1, delay=-1), alkstore.InvalidArgument),
        (JobSpec(1, delay=float("nan")), alkstore.InvalidArgument),
        (JobSpec(1, delay=True), alkstore.InvalidArgument),
        (JobSpec(1, delay=1, run_at=5), alkstore.InvalidArgument),
        (JobSpec(1, run_at=datetime(2030, 1, 1)), alkstore.InvalidArgument),
        (JobSpec(1, priority=2**31), alkstore.InvalidArgument),
        (JobSpec(1, priority=1.5), alkstore.InvalidArgument),  # type: ignore[arg-type]
        (JobSpec(1, max_attempts=0), alkstore.InvalidArgument),
        (JobSpec(1, dedupe_key=""), alkstore.InvalidArgument),
        (JobSpec(1, dedupe_key=7), alkstore.InvalidArgument),  # type: ignore[arg-type]
        (JobSpec(1, expires=-5), alkstore.InvalidArgument),
        (JobSpec(1, headers={"a": 1}), alkstore.EventError),  # type: ignore[dict-item]
        (JobSpec("x" * 5000), alkstore.PayloadTooLarge),
        ("x" * 5000, alkstore.PayloadTooLarge),
        (JobSpec(object()), alkstore.EventError),
        (object(), alkstore.EventError),
    ]
    for item, error in bad:
        with pytest.raises(error):
            q.enqueue_many([JobSpec("ok"), "ok", item, "ok"])
    with pytest.raises(alkstore.InvalidArgument):
        q.enqueue_many(["ok"], delay=-1)
    with pytest.raises(alkstore.InvalidArgument):
        q.enqueue_many(["ok"], on_duplicate="skip")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        q.enqueue_many(["ok"], dely=1)
    assert q.stats() == alkstore.QueueStats(0, 0, 0, 0, None)


def test_a_rolled_back_batch_leaves_nothing(
    backend: Backend, bstore: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = bstore.queue("rollback")
    engine = bstore.engine

    def fail(*args: Any) -> list[int]:
        raise alkstore.StorageError("the insert failed")

    monkeypatch.setattr(engine, "insert_jobs", fail)
    monkeypatch.setattr(engine, "run_many_in", fail)
    with pytest.raises(alkstore.StorageError):
        q.enqueue_many(range(10), dedupe_key="k", on_duplicate="ignore")
    monkeypatch.undo()
    assert jobs(backend, bstore, "rollback") == []
    assert len(q.enqueue_many(range(10))) == 10


def test_a_large_batch_round_trips(store: alkstore.Store) -> None:
    q = store.queue("large")
    n = 20_000
    batch = [
        JobSpec({"n": i}, dedupe_key=f"k{i}", priority=i % 2) if i % 3 else i for i in range(n)
    ]
    ids = ints(q.enqueue_many(batch))
    assert len(ids) == n
    claimed = q.claim_many(n)
    assert [j.id for j in claimed] == [ids[i] for i in range(n) if i % 3 and i % 2] + [
        ids[i] for i in range(n) if not (i % 3 and i % 2)
    ]
    assert q.ack_many(claimed) == []
    assert None not in q.enqueue_many(batch[:4])  # the keys are free again


def test_postgres_copies_batches_from_bulk_min(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies: list[str] = []
    original = _conn.Cursor.copy

    def spy(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        copies.append(str(statement))
        return original(self, statement, *args, **kwargs)

    monkeypatch.setattr(_conn.Cursor, "copy", spy)
    with pg_backend.migrated() as store:
        q = store.queue("copied")
        small = store.engine.bulk_min - 1
        q.enqueue_many(range(small))
        assert copies == []
        ids = q.enqueue_many(range(store.engine.bulk_min))
        assert len(copies) == 1 and f"COPY {pg_backend.namespace}.jobs" in copies[0]
        assert (
            q.enqueue_many(range(10_000), dedupe_key="k", on_duplicate="ignore")[1:]
            == [None] * 9_999
        )
        assert len(copies) == 2
        assert len(ids) == store.engine.bulk_min


def test_postgres_ids_when_other_sessions_take_ids_meanwhile(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """COPY returns no ids: with another enqueue between the sequence reads around it, the
    ids are read back, not assumed to be a range."""
    with pg_backend.migrated() as store, pg_backend.migrated() as other:
        original = _conn.Cursor.copy
        interleaved: list[int] = []

        def copy_beside_another_enqueue(self: Any, statement: Any, *a: Any, **k: Any) -> Any:
            interleaved.append(other.queue("other").enqueue("meanwhile"))
            return original(self, statement, *a, **k)

        monkeypatch.setattr(_conn.Cursor, "copy", copy_beside_another_enqueue)
        q = store.queue("bulk")
        ids = ints(q.enqueue_many(range(100)))
        monkeypatch.undo()
        assert interleaved == [ids[0] - 1]  # taken between the sequence reads
        assert [(j.id, j.payload) for j in q.claim_many(200)] == list(
            zip(ids, range(100), strict=True)
        )


def test_append_many_keeps_order_and_rolls_back(backend: Backend) -> None:
    """Many events (PostgreSQL: one COPY from `copy_min`) keep their order among single
    appends, and a rolled back transaction takes all of them."""
    with backend.migrated() as store:
        many = [OrderPlaced(order_id=n) for n in range(1, 301)]
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.append_many(many)
            raise RuntimeError
        with store.transaction() as tx:
            tx.append(OrderPlaced(order_id=0))
            tx.append_many(many, key="k", headers={"h": "v"})
            tx.append(OrderPlaced(order_id=301))
        entries = store.log.read(limit=1000)
        assert [e.payload.order_id for e in entries] == list(range(302))  # type: ignore[attr-defined]
        assert {(e.key, tuple(e.headers.items())) for e in entries[1:-1]} == {("k", (("h", "v"),))}
        with pytest.raises(alkstore.EventError), store.transaction() as tx:
            tx.append_many([*many, object()])  # type: ignore[list-item]
        assert store.log.head() == entries[-1].position


def test_postgres_append_many_copies_from_copy_min(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies: list[str] = []
    original = _conn.Cursor.copy

    def spy(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        copies.append(str(statement))
        return original(self, statement, *args, **kwargs)

    monkeypatch.setattr(_conn.Cursor, "copy", spy)
    with pg_backend.migrated() as store:
        copy_min = store.engine.copy_min  # type: ignore[attr-defined]
        with store.transaction() as tx:
            tx.append_many([OrderPlaced(order_id=n) for n in range(copy_min - 1)])
        assert copies == []
        with store.transaction() as tx:
            tx.append_many([OrderPlaced(order_id=n) for n in range(copy_min)])
        assert len(copies) == 1 and f"COPY {pg_backend.namespace}.events" in copies[0]
        assert len(store.log.read(limit=1000)) == 2 * copy_min - 1
