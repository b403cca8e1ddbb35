"""Replace and debounce on the relay's fan-out, and so on schedules (docs/adr/0022,
addendum 2026-12-01). A subscription made with `replace_by_key=True` gives each job its
event's key as dedupe key, and a newer event with the key *replaces* the waiting job
(its id kept; payload, headers, position and run time the newest event's); a job a
worker holds keeps running and the newer one waits beside it. `debounce_by_key=seconds`
is the same with the job due that long after the newest event's relay: a burst runs
once, when it has been quiet for the window. Subscriptions without them are untouched.
Both engines, on an injected clock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced


def _append(store: alkstore.Store, *keys: str | None, start: int = 0) -> None:
    with store.transaction() as tx:
        for n, key in enumerate(keys, start):
            tx.append(OrderPlaced(order_id=n, total_cents=n), key=key)


def _jobs(q: alkstore.Queue) -> list[tuple[int, str | None, str | None, int | None, int]]:
    """(id, key, dedupe key, position, order_id) of each live job, in id order."""
    return [(j.id, j.key, j.dedupe_key, j.position, j.raw_payload["order_id"]) for j in q.jobs()]


def test_a_newer_event_replaces_the_waiting_job(sstore: alkstore.Store) -> None:
    sstore.subscribe("latest", ["test.*"], start="beginning", replace_by_key=True)
    sstore.subscribe("audit", ["test.*"], start="beginning")  # beside it, as before
    _append(sstore, "a", "a", "b", None, "a", None, "b")
    assert sstore.relay_batch() == (11, 7)  # latest: a, b and the two without a key
    latest = sstore.queue("latest")
    got = _jobs(latest)
    assert [row[1:] for row in got] == [  # in log order: the newest "a", "b" of the batch
        (None, None, 4, 3),
        ("a", "a", 5, 4),
        (None, None, 6, 5),
        ("b", "b", 7, 6),
    ]
    assert len(sstore.queue("audit").jobs()) == 7
    ids = {row[1]: row[0] for row in got if row[1]}
    _append(sstore, "a", "c", start=10)  # another batch: "a" is replaced in place
    assert sstore.relay_batch() == (4, 2)
    after = {row[1]: row[1:] for row in _jobs(latest) if row[1]}
    assert after == {"a": ("a", "a", 8, 10), "b": ("b", "b", 7, 6), "c": ("c", "c", 9, 11)}
    assert {row[1]: row[0] for row in _jobs(latest) if row[1] in ids} == ids


def test_a_replaced_job_starts_over(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.subscribe("latest", ["test.*"], start="beginning", replace_by_key=True)
    _append(sstore, "a")
    sstore.relay_batch()
    q = sstore.queue("latest")
    job = q.claim()
    assert job is not None
    job.retry(delay=60, error="boom")
    clock.advance(1)
    _append(sstore, "a", start=1)
    sstore.relay_batch()
    info = q.get(job.id)
    assert isinstance(info, alkstore.JobInfo)
    assert (info.attempts, info.history, info.state, info.position) == (0, [], "ready", 2)
    assert info.visible_at.timestamp() == clock()
    assert info.enqueued_at.timestamp() == clock()


def test_a_running_job_keeps_running_and_the_newer_one_waits_beside_it(
    sstore: alkstore.Store,
) -> None:
    sstore.subscribe("latest", ["test.*"], start="beginning", replace_by_key=True)
    _append(sstore, "a")
    sstore.relay_batch()
    q = sstore.queue("latest")
    running = q.claim()
    assert running is not None
    _append(sstore, "a", start=1)
    _append(sstore, "a", start=2)  # two batches: the second replaces the first's job
    sstore.relay_batch(batch=1)
    sstore.relay_batch(batch=1)
    assert [row[1:] for row in _jobs(q)] == [("a", None, 1, 0), ("a", "a", 3, 2)]
    running.ack()
    job = q.claim()
    assert job is not None and job.position == 3
    assert q.claim() is None


def test_debounce_runs_a_burst_once_when_the_key_is_quiet(
    sstore: alkstore.Store, clock: Clock
) -> None:
    sstore.subscribe("quiet", ["test.*"], start="beginning", debounce_by_key=10)
    q = sstore.queue("quiet")
    _append(sstore, "doc")
    sstore.relay_batch()
    for n in (1, 2):
        clock.advance(4)
        _append(sstore, "doc", start=n)
        sstore.relay_batch()
    _append(sstore, None, start=3)  # no key: no debounce, but the window's delay
    sstore.relay_batch()
    assert [(row[1], row[4]) for row in _jobs(q)] == [("doc", 2), (None, 3)]
    clock.advance(9)
    assert q.claim() is None, "each event pushed the run back"
    clock.advance(1)
    jobs = q.claim_many(5)
    assert sorted(j.raw_payload["order_id"] for j in jobs) == [2, 3]


def test_options_are_checked_and_resubscribing_turns_them_off(sstore: alkstore.Store) -> None:
    for bad in (
        {"replace_by_key": "yes"},
        {"debounce_by_key": -1},
        {"debounce_by_key": float("inf")},
        {"debounce_by_key": 367 * 86_400},
        {"debounce_by_key": True},
        {"dedupe_by_key": True, "replace_by_key": True},
        {"dedupe_by_key": True, "debounce_by_key": 5},
    ):
        with pytest.raises(alkstore.InvalidArgument):
            sstore.subscribe("latest", ["test.*"], **bad)
    assert sstore.subscriptions() == []
    sstore.subscribe("latest", ["test.*"], start="beginning", replace_by_key=True)
    _append(sstore, "a", "a")
    sstore.relay_batch()
    sstore.subscribe("latest", ["test.*"])  # both default to off
    _append(sstore, "a", start=2)
    sstore.relay_batch()
    assert [row[1:4] for row in _jobs(sstore.queue("latest"))] == [("a", "a", 2), ("a", None, 3)]


def test_an_ordered_queue_keeps_a_replaced_job_behind_its_head(sstore: alkstore.Store) -> None:
    sstore.subscribe("seq", ["test.*"], start="beginning", replace_by_key=True, ordered=True)
    q = sstore.queue("seq")
    _append(sstore, "k")
    sstore.relay_batch()
    head = q.claim()  # the head runs: it gives up its key to the next event's job
    assert head is not None
    _append(sstore, "k", start=1)
    sstore.relay_batch()
    _append(sstore, "k", start=2)  # replaces the held job, which stays held
    sstore.relay_batch()
    assert [i.state for i in q.jobs()] == ["running", "held"]
    assert q.claim() is None
    head.ack()
    job = q.claim()
    assert job is not None and job.raw_payload["order_id"] == 2


def test_a_schedule_replaces_its_waiting_job_while_workers_are_down(
    sstore: alkstore.Store, clock: Clock
) -> None:
    sstore.subscribe("reports", ["test.*"], replace_by_key=True)
    sstore.schedules.add("nightly", every="60s", event=OrderPlaced(order_id=1), key="nightly")
    boundaries = []
    for _ in range(3):  # three firings, each relayed, while nobody handles the job
        assert sstore.fire_schedules() == 1
        boundaries.append(clock())
        sstore.relay_batch()
        clock.advance(60)
    reports = sstore.queue("reports")
    jobs = reports.jobs()
    assert len(jobs) == 1, "one waiting job, not three"
    assert jobs[0].raw_payload["order_id"] == 1
    boundary = jobs[0].headers["alkstore-boundary"]
    assert boundary.startswith(_iso(boundaries[-1])), "the newest firing's"
    job = reports.claim()
    assert job is not None
    assert sstore.fire_schedules() == 1  # fires while the job runs: waits beside it
    sstore.relay_batch()
    assert [i.state for i in reports.jobs()] == ["running", "ready"]
    job.ack()


def test_missed_boundaries_fired_at_once_make_one_job(sstore: alkstore.Store, clock: Clock) -> None:
    sstore.subscribe("reports", ["test.*"], replace_by_key=True)
    sstore.schedules.add(
        "often", every="60s", event=OrderPlaced(order_id=1), key="often", catch_up="all"
    )
    clock.advance(60 * 5)  # the scheduler was down too: catch_up="all" fires six at once
    assert sstore.fire_schedules() == 6
    sstore.relay_batch()
    jobs = sstore.queue("reports").jobs()
    assert len(jobs) == 1
    assert jobs[0].headers["alkstore-boundary"].startswith(_iso(clock()))


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def test_a_relay_replacing_while_a_worker_claims_loses_no_newest_event(backend: Backend) -> None:
    """The relay replaces keys in small batches while a consumer claims and acks: at no
    time does a key have two waiting jobs, the consumer sees each key's events in order,
    and the newest event of every key is handled."""
    with backend.migrated(pool_size=6) as store:
        store.subscribe("latest", ["test.*"], start="beginning", replace_by_key=True)
        q = store.queue("latest")
        keys = [f"k{n}" for n in range(5)]
        errors: list[BaseException] = []
        seen: dict[str, list[int]] = {key: [] for key in keys}
        stop = threading.Event()

        def consume() -> None:
            try:
                while not stop.is_set() or q.jobs():
                    job = q.claim()
                    if job is not None:
                        seen[str(job.key)].append(job.raw_payload["order_id"])
                        job.ack()
            except BaseException as exc:
                errors.append(exc)

        consumer = threading.Thread(target=consume)
        consumer.start()
        try:
            for n in range(200):
                with store.transaction() as tx:
                    tx.append(OrderPlaced(order_id=n), key=keys[n % 7 % 5])
                if n % 3 == 2:
                    store.relay_batch(batch=4)
                    waiting = [j.key for j in q.jobs() if j.state != "running"]
                    assert len(waiting) == len(set(waiting)), waiting
            while store.relay_batch(batch=4) != (0, 0):
                pass
        finally:
            stop.set()
            consumer.join(60)
        assert errors == []
        last = {keys[n % 7 % 5]: n for n in range(200)}
        for key in keys:
            assert seen[key] == sorted(set(seen[key])), key
            assert seen[key][-1] == last[key], key
