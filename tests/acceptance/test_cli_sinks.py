"""A parked broker sink as an operator sees it and resumes it (docs/adr/0026):
`alkstore status` and `subscriptions list` say why it is parked and where; `subscriptions
resume NAME` starts it again, and the relay delivers from the parked message on."""

from __future__ import annotations

from pathlib import Path

import relay
from tests.acceptance.test_cli_relay import run
from tests.conftest import Backend
from tests.events import OrderPlaced
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
