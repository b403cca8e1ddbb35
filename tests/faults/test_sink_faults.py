"""Broker sinks under faults (docs/adr/0026), against real brokers.

- The relay (a CLI subprocess) is killed with SIGKILL ten times while writers append,
  feeding three sink subscriptions at once (Redis Streams, NATS JetStream, RabbitMQ):
  after dedupe on the message id, each broker holds exactly the committed events, each
  key's events in commit order; raw duplicates (republished after a kill) are counted
  and printed (Redis and JetStream drop them themselves).
- A broker of the test's own (redis-server, nats-server, a RabbitMQ node, each on a free
  port: the machine's services are shared and never stopped) stops in the middle of a
  run: the relay keeps the log, shows the lag, retries, and delivers every event once
  after the broker is back (same port, same data directory).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import msgspec
import pytest

import alkstore
import relay
from tests import brokers
from tests.conftest import Backend
from tests.faults import relay_support as rs
from tests.sink_targets import Got, Target, target

KILLS = 10
ACTIVE_WAIT = 20.0
KINDS = ("redis", "nats", "rabbitmq")


@pytest.fixture
def targets() -> Iterator[dict[str, Target]]:
    with ExitStack() as stack:
        yield {kind: stack.enter_context(target(kind)) for kind in KINDS}


def _writer_seq(got: Got) -> tuple[int, int]:
    event = msgspec.json.decode(got.body)
    return int(event["writer"]), int(event["seq"])


def _sinks_caught_up(store: alkstore.Store, final: rs.RelayProcess, timeout: float) -> None:
    def done() -> bool:
        assert final.alive(), final.describe()
        head = store.log.head()
        return all(s.checkpoint == head for s in store.sink_subscriptions())

    brokers.wait_until(done, timeout, "sinks catching up")


@pytest.mark.slow
def test_relay_killed_ten_times_every_committed_event_reaches_every_broker_in_key_order(
    pg_backend: Backend, targets: dict[str, Target], rng: random.Random, tmp_path: Path
) -> None:
    store = pg_backend.connect()
    store.migrate()
    for kind, dest in targets.items():
        store.subscribe_sink(kind, dest.url, ["relayfault.*"], start="beginning", **dest.options)
    stop = threading.Event()
    with rs.fleet(pg_backend, tmp_path) as relays:
        with ThreadPoolExecutor(max_workers=2) as pool:
            writers = [
                pool.submit(rs.write_until, store, w, rng.randrange(2**32), stop) for w in range(2)
            ]
            try:
                for _ in range(KILLS):
                    sink_batch = rng.choice([25, 1_000])  # small: batches read ahead
                    proc = relays.start(extra=["--sink-batch", str(sink_batch)])
                    deadline = time.monotonic() + ACTIVE_WAIT
                    while not proc.was_active():
                        assert proc.alive() and time.monotonic() < deadline, proc.describe()
                        time.sleep(0.01)
                    time.sleep(rng.uniform(0.1, 1.0))
                    proc.kill()
                    assert proc.proc.returncode == -signal.SIGKILL
            finally:
                stop.set()
            results = [w.result(timeout=60) for w in writers]
        before_final = {s.name: s.checkpoint for s in store.sink_subscriptions()}
        final = relays.start()
        _sinks_caught_up(store, final, 60)
        assert final.terminate() == 0, final.describe()
    committed = set().union(*(r.committed for r in results))
    rolled_back = set().union(*(r.rolled_back for r in results))
    report = []
    for kind, dest in targets.items():
        raw = dest.received()
        seen: dict[str, Got] = {}
        for got in raw:
            seen.setdefault(got.id, got)
        events = [_writer_seq(got) for got in seen.values()]
        assert set(events) == committed and not set(events) & rolled_back, kind
        assert len(events) == len(committed), f"{kind}: the same event under two ids"
        for writer in (0, 1):  # each key (one writer) in commit order
            seqs = [seq for w, seq in events if w == writer]
            assert seqs == sorted(seqs), f"{kind}: key w{writer} out of order"
            assert {g.key for g in seen.values() if _writer_seq(g)[0] == writer} == {f"w{writer}"}
        report.append(f"{kind} {len(raw) - len(seen)} raw duplicates")
    assert min(before_final.values()) > 0, "the killed relays never published anything"
    store.close()
    print(f"{KILLS} kills, {len(committed)} events committed: " + ", ".join(report))


@pytest.mark.parametrize("kind", ["redis", "nats", "rabbitmq"])
def test_a_broker_restart_in_the_middle_loses_nothing(kind: str, tmp_path: Path) -> None:
    store = alkstore.connect(f"sqlite:///{tmp_path / 'log.db'}", namespace="restart")
    store.migrate()
    with brokers.own_broker(kind, tmp_path) as broker, target(kind, broker.url) as dest:
        store.subscribe_sink("feed", dest.url, ["relayfault.*"], **dest.options)
        r = relay.Relay(store, lease_ttl=5)

        def append(n: int, start: int) -> None:
            for i in range(start, start + n):
                with store.transaction() as tx:
                    tx.append(rs.Tick(writer=0, seq=i), key="w0")

        def caught_up() -> bool:
            r.step()
            return store.sink_subscriptions()[0].checkpoint == store.log.head()

        append(10, 0)
        brokers.wait_until(caught_up, 10, "before the restart")
        broker.stop()
        append(10, 10)
        r.step()  # publishing fails: the relay keeps the events
        (sub,) = store.sink_subscriptions()
        assert sub.checkpoint == 10 and sub.parked is None
        (lag,) = store.status().subscriptions
        assert lag.events == 10 and lag.seconds is not None
        assert r.sinks.retries >= 1
        broker.start()
        append(5, 20)
        brokers.wait_until(caught_up, 30, "after the restart (with backoff)")
        got = dest.received()
        assert [_writer_seq(g) for g in got] == [(0, i) for i in range(25)]
        r.sinks.close()
    store.close()
