"""The processes' edges on both engines: constructors refuse bad numbers with a typed
error, and every process refuses an unmigrated database at startup instead of
waiting forever; a `once` drain whose claims keep failing ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import alkstore
import relay
from relay.worker import _dispatch
from tests.conftest import Backend

BAD: list[tuple[Callable[[alkstore.Store], object], str]] = [
    (lambda s: relay.Relay(s, batch=0), "batch"),
    (lambda s: relay.Relay(s, batch=-5), "batch"),
    (lambda s: relay.Relay(s, batch=2.5), "batch"),  # type: ignore[arg-type]
    (lambda s: relay.Relay(s, batch=True), "batch"),
    (lambda s: relay.Relay(s, lease_ttl=0), "lease_ttl"),
    (lambda s: relay.Relay(s, lease_ttl=float("nan")), "lease_ttl"),
    (lambda s: relay.Relay(s, poll=0), "poll"),
    (lambda s: relay.Relay(s, retention=-1), "retention"),
    (lambda s: relay.Relay(s, retention=float("inf")), "retention"),
    (lambda s: relay.Relay(s, maintenance_every=0), "maintenance_every"),
    (lambda s: relay.Scheduler(s, lease_ttl=-1), "lease_ttl"),
    (lambda s: relay.Scheduler(s, poll=float("inf")), "poll"),
    (lambda s: relay.Worker(s, concurrency=0), "concurrency"),
    (lambda s: relay.Worker(s, concurrency=-5), "concurrency"),
    (lambda s: relay.Worker(s, batch=0), "batch"),
    (lambda s: relay.Worker(s, visibility=0), "visibility"),
    (lambda s: relay.Worker(s, poll=-1), "poll"),
    (lambda s: relay.Worker(s, grace=-1), "grace"),
    (lambda s: relay.Worker(s, ack_flush=float("nan")), "ack_flush"),
    (lambda s: relay.Worker(s, maintenance_every=0), "maintenance_every"),
    (lambda s: relay.Worker(s, unknown_type_grace=-1), "unknown_type_grace"),
    (lambda s: setattr(relay.Worker(s), "concurrency", 0), "concurrency"),
    (lambda s: relay.Worker(s).handler("q", concurrency=0), "concurrency"),
    (lambda s: relay.Worker(s).handler("q", concurrency=1.5), "concurrency"),  # type: ignore[arg-type]
    (lambda s: relay.Worker(s).handler("q", timeout=0), "timeout"),
    (lambda s: s.relay_batch(batch=0), "batch"),
    (lambda s: alkstore.connect("sqlite:///:memory:", pool_size=0), "pool_size"),
]


@pytest.mark.parametrize(("build", "name"), BAD, ids=[f"{n}-{i}" for i, (_, n) in enumerate(BAD)])
def test_bad_numbers_are_typed_errors(
    store: alkstore.Store, build: Callable[[alkstore.Store], object], name: str
) -> None:
    with pytest.raises(alkstore.InvalidArgument, match=name):
        build(store)
    assert store.lease("relay", 1).holder_info() is None


def test_the_defaults_and_zero_waits_are_accepted(store: alkstore.Store) -> None:
    relay.Relay(store)
    relay.Scheduler(store)
    worker = relay.Worker(store, grace=0, ack_flush=0, visibility=None)
    worker.concurrency = 3
    assert worker.concurrency == 3


def noop(job: alkstore.Job[Any]) -> None:
    pass


@pytest.mark.parametrize("process", ["relay", "scheduler", "worker", "worker-once"])
def test_every_process_refuses_an_unmigrated_database_at_startup(
    backend: Backend, process: str
) -> None:
    store = backend.connect()
    try:
        runner: Callable[[], None]
        if process == "relay":
            runner = relay.Relay(store, lease_ttl=1).run
        elif process == "scheduler":
            runner = relay.Scheduler(store, lease_ttl=1).run
        else:
            worker = relay.Worker(store, poll=0.1)
            worker.handler("q")(noop)
            once = process == "worker-once"

            def runner() -> None:
                worker.run(once=once)

        started = time.monotonic()
        with pytest.raises(alkstore.NotMigrated, match="alkstore migrate"):
            runner()
        assert time.monotonic() - started < 10
    finally:
        store.close()


def test_a_once_drain_whose_claims_keep_failing_ends(
    store: alkstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[float] = []

    def broken(self: alkstore.Queue, *args: Any, **kwargs: Any) -> list[alkstore.Job[Any]]:
        calls.append(time.monotonic())
        raise alkstore.StorageError("the database went away")

    monkeypatch.setattr(alkstore.Queue, "claim_many", broken)
    worker = relay.Worker(store, poll=0.1)
    worker.handler("q")(noop)
    started = time.monotonic()
    with pytest.raises(alkstore.StorageError, match="the database went away"):
        worker.run(once=True)
    assert time.monotonic() - started < 30
    assert len(calls) == _dispatch.ONCE_ATTEMPTS
