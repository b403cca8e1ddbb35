"""Broker sinks as an operator sees them (docs/adr/0026): `subscriptions add NAME
PATTERN... --sink URL` creates one (against the real brokers, delivered by `alkstore
relay`), `list` shows it with its options, `remove` ends it; a parked sink: `alkstore
status` and `subscriptions list` say why it is parked and where; `subscriptions resume
NAME` starts it again, and the relay delivers from the parked message on."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest

import relay
from tests.acceptance.test_cli_relay import run
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.processes import CliProcess
from tests.sink_targets import target


def test_status_shows_a_parked_sink_and_resume_starts_it_again(tmp_path: Path) -> None:
    backend = Backend("sqlite", f"sqlite:///{tmp_path / 'cli.db'}", "sinks")
    with backend.migrated() as store, target("redis") as dest:
        store.subscribe_sink("feed", dest.url, ["test.*"], **dest.options)
        with store.transaction() as tx:
            for i in range(3):
                tx.append(OrderPlaced(order_id=i), key="k")
        dest.refuse()
        r = relay.Relay(store, lease_ttl=5)
        r.step()
        status = run(backend, "status")
        assert status.returncode == 0, status.stderr
        line = next(x for x in status.stdout.splitlines() if x.startswith("  feed -> "))
        assert line.startswith(f"  feed -> {dest.url}: checkpoint 0, 3 events / ")
        assert "PARKED: position 1 (test.order_placed): redis refused entry 1" in line
        assert "WRONGTYPE" in line
        listed = run(backend, "subscriptions", "list")
        assert f"feed\ttest.*\tcheckpoint 0\t-> {dest.url}\tPARKED: position 1" in listed.stdout
        dest.accept()
        resumed = run(backend, "subscriptions", "resume", "feed")
        assert (resumed.returncode, resumed.stderr) == (0, "")
        assert resumed.stdout == "resumed feed: the relay publishes from its checkpoint on\n"
        missing = run(backend, "subscriptions", "resume", "nothing")
        assert missing.returncode != 0 and "no broker sink subscription 'nothing'" in missing.stderr
        r.step()
        assert [g.position for g in dest.received()] == [1, 2, 3]
        after = run(backend, "status").stdout
        assert f"  feed -> {dest.url}: checkpoint 3, 0 events / caught up" in after
        r.sinks.close()


FLAG = {"subject": "--subject", "stream": "--stream", "routing_key": "--routing-key"}


@pytest.mark.parametrize("kind", ["nats", "rabbitmq", "redis"])
def test_an_operator_adds_lists_and_removes_a_sink(tmp_path: Path, kind: str) -> None:
    """`subscriptions add NAME PATTERN... --sink URL` with the destination flags, then
    `alkstore relay` (a process) delivers what was appended, `subscriptions list` shows
    the sink with its options and checkpoint, and `subscriptions remove` ends it."""
    backend = Backend("sqlite", f"sqlite:///{tmp_path / 'cli.db'}", "sinks")
    with backend.migrated() as store, target(kind) as dest:
        with store.transaction() as tx:
            tx.append(OrderPlaced(order_id=0), key="before")  # start now: not published
        flags = [arg for name, value in dest.options.items() for arg in (FLAG[name], value)]
        added = run(backend, "subscriptions", "add", "feed", "test.*", "--sink", dest.url, *flags)
        assert (added.returncode, added.stderr) == (0, ""), added.stderr
        options = " ".join(f"{k}={v}" for k, v in sorted(dest.options.items()))
        assert added.stdout == (
            f"subscribed sink feed to test.* after position 1 -> {dest.url} {options}\n"
        )
        [sub] = store.sink_subscriptions()
        assert (sub.name, sub.sink, sub.events, sub.options, sub.checkpoint) == (
            "feed", dest.url, ["test.*"], dest.options, 1
        )  # fmt: skip
        with store.transaction() as tx:
            for i in range(1, 4):
                tx.append(OrderPlaced(order_id=i), key="k")
        relay_flags = ["--db", backend.url, "--namespace", backend.namespace, "--lease-ttl", "2"]
        process = CliProcess("relay", relay_flags, tmp_path / "relay.log")
        try:
            deadline = time.monotonic() + 30
            while store.sink_subscriptions()[0].checkpoint < 4:
                assert time.monotonic() < deadline and process.alive(), process.describe()
                time.sleep(0.05)
        finally:
            process.close()
        assert [g.position for g in dest.received()] == [2, 3, 4]
        listed = run(backend, "subscriptions", "list")
        assert listed.stdout == f"feed\ttest.*\tcheckpoint 4\t-> {dest.url}\t{options}\n"
        removed = run(backend, "subscriptions", "remove", "feed")
        assert (removed.returncode, removed.stderr) == (0, "")
        assert (
            removed.stdout == "removed the sink subscription feed (what the broker holds stays)\n"
        )
        assert store.sink_subscriptions() == []
        assert run(backend, "subscriptions", "list").stdout == "subscriptions: none\n"


def test_an_existing_sink_is_updated_and_keeps_its_checkpoint(tmp_path: Path) -> None:
    backend = Backend("sqlite", f"sqlite:///{tmp_path / 'cli.db'}", "sinks")
    with backend.migrated() as store:
        with store.transaction() as tx:
            tx.append(OrderPlaced(order_id=0))
        url = "redis://127.0.0.1:6379/0"  # not reached: adding a sink needs no broker
        first = run(backend, "subscriptions", "add", "feed", "a.*", "--sink", url, "--json")
        assert first.returncode == 0 and msgspec.json.decode(first.stdout)["checkpoint"] == 1
        with store.transaction() as tx:
            tx.append(OrderPlaced(order_id=1))
        again = run(
            backend, "subscriptions", "add", "feed", "a.*", "b.*", "--sink", url,
            "--stream", "out-{type}", "--maxlen", "1000", "--start", "beginning",
        )  # fmt: skip
        assert (again.returncode, again.stderr) == (0, "")
        assert again.stdout == (
            f"updated sink feed: a.*,b.* -> {url} maxlen=1000 stream=out-{{type}} "
            "(checkpoint kept at 1)\n"
        )
        [sub] = store.sink_subscriptions()
        assert (sub.events, sub.options) == (
            ["a.*", "b.*"],
            {"stream": "out-{type}", "maxlen": 1000},
        )
        rabbit = "amqp://guest:guest@127.0.0.1:5672/"
        other = run(
            backend, "subscriptions", "add", "rabbit", "a.*", "--sink", rabbit,
            "--option", "persistent=false", "--routing-key", "{type}.{key}",
        )  # fmt: skip
        assert other.returncode == 0, other.stderr
        assert store.sink_subscriptions()[1].options == {
            "persistent": False,
            "routing_key": "{type}.{key}",
        }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["add", "feed", "a.*", "--sink", "redis://127.0.0.1:6379/0", "--subject", "x"],
            "alkstore: sink 'feed': unknown sink options: subject",
        ),
        (
            ["add", "feed", "a.*", "--sink", "nats://127.0.0.1:4222", "--option", "x=1"],
            "alkstore: sink 'feed': unknown sink options: x",
        ),
        (
            ["add", "feed", "a.*", "--sink", "amqp://127.0.0.1/", "--option", "persistent=no"],
            "alkstore: sink 'feed': sink option persistent='no' has the wrong type",
        ),
        (["add", "feed", "a.*", "--sink", "kafka://127.0.0.1:9092"], "alkstore: invalid sink"),
        (
            ["add", "feed", "a.*", "--sink", "nats://h", "--subject", "o.{id}"],
            "alkstore: sink option subject='o.{id}': {id} is not one of",
        ),
        (["add", "q", "a.*", "--stream", "s"], "alkstore: sink options (stream) go with"),
        (["add", "feed", "a.*", "--sink", "nats://h", "--option", "bad"], "alkstore: --option"),
        (["remove", "feed", "--sink", "nats://h"], "alkstore: --sink and the sink options go"),
        (["add", "feed", "--sink", "nats://h"], "alkstore: subscriptions add needs event"),
        (["add", "queue", "a.*", "--sink", "nats://h"], "alkstore: 'queue' is a queue"),
        (
            ["add", "feed", "a.*", "--sink", "nats://h", "--replace-by-key"],
            "alkstore: --dedupe/--replace/--debounce-by-key are a queue's, not a sink's",
        ),
    ],
)
def test_sink_mistakes_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    backend = Backend("sqlite", f"sqlite:///{tmp_path / 'cli.db'}", "sinks")
    with backend.migrated() as store:
        store.subscribe("queue", ["a.*"])
        out = run(backend, "subscriptions", *args)
        assert out.returncode in (1, 2) and out.stdout == ""
        assert out.stderr.startswith(message), out.stderr
        assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
        assert [s.name for s in store.sink_subscriptions()] == []
