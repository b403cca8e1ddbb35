"""Which job becomes its key's head when an insert does not happen (docs/adr/0021,
addendum 2026-12-01c). In an ordered queue an enqueue with a dedupe key that another
key's live job holds is ignored, or replaces that job; the job it would have been is
never its own key's head, and the key's next job is. On PostgreSQL the insert trigger
decides before the conflict is known (it runs first); its key's row says whether a
head was really inserted. Both engines, both bulk paths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import alkstore
from alkstore import JobSpec
from tests.conftest import Backend


@pytest.fixture(params=["bulk", "single"])
def hstore(backend: Backend, request: pytest.FixtureRequest) -> Iterator[alkstore.Store]:
    with backend.migrated() as store:
        bulk = request.param == "bulk"
        store.engine.bulk_min = 1 if bulk else 1_000_000  # type: ignore[misc]
        yield store


def first_round(q: alkstore.Queue) -> list[tuple[str | None, Any]]:
    jobs = q.claim_many(10)
    return sorted((job.key, job.raw_payload) for job in jobs)


def ordered(store: alkstore.Store) -> alkstore.Queue:
    q = store.queue("ordered")
    q.configure(ordered=True)
    q.enqueue("a", group="g1", dedupe_key="d")
    return q


def test_an_ignored_duplicate_is_not_its_keys_head(hstore: alkstore.Store) -> None:
    q = ordered(hstore)
    assert q.enqueue("b", group="g2", dedupe_key="d", on_duplicate="ignore") is None
    q.enqueue("c", group="g2")
    assert [i.state for i in q.jobs()] == ["ready", "ready"]
    assert first_round(q) == [("g1", "a"), ("g2", "c")]


def test_an_ignored_duplicate_in_a_batch_leaves_the_next_job_the_head(
    hstore: alkstore.Store,
) -> None:
    q = ordered(hstore)
    ids = q.enqueue_many(
        [
            JobSpec("b", group="g2", dedupe_key="d"),
            JobSpec("c", group="g2"),
            JobSpec("e", group="g2"),
        ],
        on_duplicate="ignore",
    )
    assert ids[0] is None
    assert [i.state for i in q.jobs()] == ["ready", "ready", "held"]
    assert first_round(q) == [("g1", "a"), ("g2", "c")]


def test_a_replacing_enqueue_in_another_key_moves_the_job_to_that_keys_order(
    hstore: alkstore.Store,
) -> None:
    """The job with the dedupe key waits in g1; a replacing enqueue names g2: the job
    leaves g1 (deleted, a new id) and is ordered in g2, ahead of g2's later job."""
    q = ordered(hstore)
    old = q.jobs()[0].id
    moved = q.enqueue("b", group="g2", dedupe_key="d", on_duplicate="replace")
    assert moved is not None and moved != old
    q.enqueue("c", group="g2")
    states = {i.id: (i.key, i.state) for i in q.jobs()}
    assert len(states) == 2 and states[moved] == ("g2", "ready")
    assert first_round(q) == [("g2", "b")]  # c waits behind it: one key, one at a time


def test_a_head_replaced_into_another_key_hands_its_key_to_the_next_job(
    hstore: alkstore.Store,
) -> None:
    q = ordered(hstore)  # "a" heads g1, holding dedupe key d
    q.enqueue("a2", group="g1")  # held behind it
    q.enqueue("x", group="g2")  # g2's head
    moved = q.enqueue("b", group="g2", dedupe_key="d", on_duplicate="replace")
    states = {i.raw_payload: (i.key, i.state) for i in q.jobs()}
    assert states == {"a2": ("g1", "ready"), "x": ("g2", "ready"), "b": ("g2", "held")}
    assert first_round(q) == [("g1", "a2"), ("g2", "x")]
    assert q.get(moved) is not None
    assert q.enqueue("b2", group="g2", dedupe_key="d", on_duplicate="replace") == moved


def test_a_replace_within_the_same_key_keeps_the_job_and_its_place(
    hstore: alkstore.Store,
) -> None:
    q = ordered(hstore)
    q.enqueue("a2", group="g1")
    old = q.jobs()[0].id
    assert q.enqueue("a-new", group="g1", dedupe_key="d", on_duplicate="replace") == old
    assert first_round(q) == [("g1", "a-new")]


def test_a_key_emptied_and_filled_again_gets_a_head(hstore: alkstore.Store) -> None:
    q = ordered(hstore)
    q.enqueue("b", group="g1")
    for expected in ([("g1", "a")], [("g1", "b")]):
        jobs = q.claim_many(10)
        assert sorted((j.key, j.raw_payload) for j in jobs) == expected
        assert q.ack_many(jobs) == []
    q.enqueue_many(["c", "e"], group="g1")
    assert [i.state for i in q.jobs()] == ["ready", "held"]
    assert first_round(q) == [("g1", "c")]
