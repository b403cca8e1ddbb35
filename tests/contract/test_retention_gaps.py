"""Retention you can see (docs/adr/0020), on both engines: a subscription or a replay that
asks for positions retention already pruned is told which range is gone, the range is
recorded on the subscription and shown by `status`, and status names the oldest position
the log still holds."""

from __future__ import annotations

import logging

import pytest

import alkstore
from tests.clock import Clock
from tests.conftest import Backend
from tests.contract.test_log_edges import append, relay_all


def pruned_log(store: alkstore.Store, clock: Clock) -> None:
    """Positions 1-7 relayed and pruned by retention; 8-9 appended after."""
    store.subscribe("early", ["*"], start="beginning")
    append(store, 7)
    relay_all(store)
    clock.advance(3_600)
    assert store.prune_log(older_than=60) == 7
    append(store, 2, first=8)


def test_a_late_subscription_from_the_beginning_is_told_what_is_gone(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="alkstore.retention")
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        status = store.status()
        assert (status.head, status.oldest_retained) == (0, None)
        pruned_log(store, clock)
        assert store.status().oldest_retained == 8

        late = store.subscribe("late", ["*"], start="beginning")
        assert (late.checkpoint, late.gap) == (0, (1, 7))
        [warning] = [r.getMessage() for r in caplog.records]
        assert "'late' starts at position 1, but positions 1-7 were pruned" in warning
        assert store.subscribe("mid", ["*"], start=5).gap == (5, 7)
        assert store.subscribe("fresh", ["*"], start=8).gap is None
        assert store.subscribe("now", ["*"]).gap is None

        again = store.subscribe("late", ["order.*", "test.*"])  # an update keeps it
        assert (again.checkpoint, again.gap) == (0, (1, 7))
        gaps = {s.queue: s.gap for s in store.subscriptions()}
        assert gaps == {"early": None, "fresh": None, "late": (1, 7), "mid": (5, 7), "now": None}

        status = store.status()
        assert {lag.queue: lag.gap for lag in status.subscriptions} == gaps
        assert status.oldest_retained == 8
        relay_all(store)
        assert [job.position for job in store.queue("late").claim_many(10)] == [8, 9]


def test_a_replay_into_pruned_positions_is_told_what_is_gone(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        pruned_log(store, clock)
        relay_all(store)
        replay = store.replay("early", 3)
        assert (replay.redelivered, replay.gap) == (2, (3, 7))
        assert [s.gap for s in store.subscriptions()] == [(3, 7)]
        (lag,) = store.status().subscriptions
        assert lag.gap == (3, 7)

        relay_all(store)
        assert store.replay("early", 9).gap is None  # a replay asks again: the record goes
        assert [s.gap for s in store.subscriptions()] == [None]


def test_a_log_pruned_to_nothing_has_no_oldest_position(backend: Backend) -> None:
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        store.subscribe("q", ["*"], start="beginning")
        append(store, 3)
        relay_all(store)
        clock.advance(3_600)
        assert store.prune_log(older_than=60) == 3
        status = store.status()
        assert (status.head, status.oldest_retained) == (3, None)
        assert store.subscribe("late", ["*"], start="beginning").gap == (1, 3)
        assert store.replay("q", 2).gap == (2, 3)
