"""Edges of the log's operator surface on both engines: replay bounds and what it
reports, status that tells the truth after retention, the pending DDL, the
migration check every process runs at startup, and reading the log in pages."""

from __future__ import annotations

from typing import Any

import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced


def append(store: alkstore.Store, n: int, first: int = 1) -> None:
    with store.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=i) for i in range(first, first + n)])


def relay_all(store: alkstore.Store) -> None:
    while store.relay_batch()[1]:
        pass


def checkpoint(store: alkstore.Store, queue: str) -> int:
    (sub,) = [s for s in store.subscriptions() if s.queue == queue]
    return sub.checkpoint


# -- replay never moves a checkpoint past the head -------------------------------------


def test_replay_past_the_head_is_refused_and_changes_nothing(store: alkstore.Store) -> None:
    store.subscribe("emails", ["*"], start="beginning")
    append(store, 5)
    relay_all(store)
    for position in (7, 99_999):
        with pytest.raises(alkstore.InvalidArgument, match="the log head is 5"):
            store.replay("emails", position)
    assert checkpoint(store, "emails") == 5
    append(store, 2, first=6)
    relay_all(store)
    assert [job.position for job in store.queue("emails").claim_many(10)] == [1, 2, 3, 4, 5, 6, 7]


def test_replay_reports_what_it_redelivers(store: alkstore.Store) -> None:
    store.subscribe("q", ["*"], start="beginning")
    append(store, 5)
    relay_all(store)
    assert store.replay("q", 2) == alkstore.Replay(
        queue="q", previous=5, checkpoint=1, redelivered=4, skipped=0
    )
    assert store.replay("q", 6) == alkstore.Replay(
        queue="q", previous=1, checkpoint=5, redelivered=0, skipped=4
    ), "a move forward up to the head skips what lies before it, and says how many"
    assert store.replay("q", 6) == alkstore.Replay("q", 5, 5, 0, 0)


def test_subscribing_from_past_the_head_is_refused(store: alkstore.Store) -> None:
    append(store, 3)
    assert store.subscribe("at_head", ["*"], start=4).checkpoint == 3
    with pytest.raises(alkstore.InvalidArgument, match="the log head is 3"):
        store.subscribe("past", ["*"], start=99_999)
    assert [s.queue for s in store.subscriptions()] == ["at_head"]


def test_a_replay_over_pruned_events_counts_only_what_is_left(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        store.subscribe("q", ["*"], start="beginning")
        append(store, 7)
        relay_all(store)
        clock.advance(3_600)
        assert store.prune_log(older_than=60) == 7
        assert store.replay("q", 1) == alkstore.Replay("q", 7, 0, 0, 0, gap=(1, 7))
        (lag,) = store.status().subscriptions
        assert (lag.checkpoint, lag.events, lag.seconds) == (0, 0, None), (
            "status counted pruned positions as events still to relay"
        )

        append(store, 3, first=8)
        relay_all(store)
        # 8-10 are left; 3-7 were pruned (docs/adr/0020)
        assert store.replay("q", 3) == alkstore.Replay("q", 10, 2, 3, 0, gap=(3, 7))
        (lag,) = store.status().subscriptions
        assert (lag.checkpoint, lag.events) == (2, 3)
        assert lag.seconds is not None


# -- the pending DDL and the startup check ----------------------------------------------


def test_pending_ddl_is_empty_once_migrated(backend: Backend) -> None:
    store = backend.connect()
    try:
        assert "CREATE TABLE" in store.sql(pending_only=True)
        with pytest.raises(alkstore.NotMigrated, match="alkstore migrate"):
            store.check()
        store.migrate()
        assert store.sql(pending_only=True) == ""
        store.check()
        assert "CREATE TABLE" in store.sql(), "the full DDL is still there to review"
    finally:
        store.close()


# -- reading the log in pages -----------------------------------------------------------


def test_tail_without_follow_reads_everything_in_pages(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for first in range(1, 101, 25):
        append(store, 25, first=first)
    limits: list[int] = []
    engine: Any = store.engine
    read = engine.read

    def spy(after: int, limit: int) -> list[alkstore.LogEntry]:
        limits.append(limit)
        result: list[alkstore.LogEntry] = read(after, limit)
        return result

    monkeypatch.setattr(engine, "read", spy)
    entries = list(store.log.tail(3, batch=7, follow=False))
    assert [e.position for e in entries] == list(range(4, 101))
    assert [e.payload for e in entries[:2]] == [OrderPlaced(order_id=4), OrderPlaced(order_id=5)]
    assert limits == [7] * 14, "the log was not read in pages of the batch size"
    assert list(store.log.tail(100, follow=False)) == []


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda s: s.log.read(-5), "after"),
        (lambda s: s.log.read(0, 0), "limit"),
        (lambda s: next(iter(s.log.tail(-1, follow=False))), "after"),
        (lambda s: next(iter(s.log.tail(0, batch=0, follow=False))), "batch"),
        (lambda s: next(iter(s.log.tail(0, timeout=-1))), "timeout"),
    ],
)
def test_log_reads_check_their_arguments(store: alkstore.Store, call: Any, name: str) -> None:
    with pytest.raises(alkstore.InvalidArgument, match=name):
        call(store)


def test_status_reports_no_backlog_on_a_quiet_log(store: alkstore.Store) -> None:
    append(store, 2)
    store.log.head()
    status = store.status()
    assert (status.head, status.unsequenced, status.oldest_appender) == (2, 0, None)
