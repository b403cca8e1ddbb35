"""Throughput per queue on the dashboard (docs/adr/0023, addendum), on both engines: a
real worker writes what it has done into its row at each refresh, and the queues page
and the queue's own page show the jobs done per second over the last minute — the
jobs it did between two of its refreshes over the store's time between them. The
store's clock is injected, so the rates are exact."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")
from starlette.testclient import TestClient

import alkstore
import relay
from alkstore import _workers
from relay.dashboard import create_app
from tests.clock import Clock
from tests.conftest import Backend
from tests.worker_support import running


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.02)
    return found


def done_cell(html: str, queue: str) -> str:
    """The "done (1 min)" cell of a queue's row in the queues table."""
    row = re.search(rf">{queue}</a>.*?</tr>", html)
    assert row, f"no row for {queue}"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row[0])
    return str(cells[5])  # after ready, scheduled, running, dead, oldest ready


def card(html: str, name: str) -> str:
    found = re.search(rf"<div class=card>{re.escape(name)}<b>(.*?)</b>", html)
    assert found, f"no card {name}"
    return found[1]


def test_the_queue_pages_show_jobs_done_per_second_from_the_workers_rows(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workers, "HEARTBEAT", 0.05)
    clock = Clock()
    t0 = clock.now
    with backend.migrated(clock=clock) as store:
        client = TestClient(create_app(store), follow_redirects=False)
        store.queue("idle").enqueue({"n": 0}, delay=3600)  # no worker serves it
        assert done_cell(client.get("/queues").text, "idle") == ""
        worker = relay.Worker(store, concurrency=4, poll=0.2)

        @worker.handler("mail", concurrency=4)
        def send(job: alkstore.Job[Any]) -> None:
            if job.payload.get("bad"):
                raise relay.Fail("bad address")

        mail = store.queue("mail")

        def row_at(at: float, done: int, dead: int = 0) -> bool:
            rows = store.workers()
            if len(rows) != 1 or rows[0].counts is None:
                return False
            counts = rows[0].counts["mail"]
            return rows[0].last_seen.timestamp() == at and (
                counts["done"],
                counts["dead"],
            ) == (done, dead)

        with running(worker):
            wait_for(store.workers, "the worker's row")
            mail.enqueue_many([{"n": n} for n in range(40)])
            wait_for(lambda: row_at(t0, 40), "40 jobs done at t0")
            clock.advance(20)
            wait_for(lambda: row_at(t0 + 20, 40), "the refresh at t0 + 20 s")
            # a worker started 20 s ago: 40 jobs over its 20 s, not a spike
            assert done_cell(client.get("/queues").text, "mail") == "2.0/s"
            page = client.get("/queues/mail").text
            assert (card(page, "done (1 min)"), card(page, "dead-lettered (1 min)")) == (
                "2.0/s",
                "0",
            )
            assert card(page, "reported by") == "1 worker"

            clock.advance(60)
            mail.enqueue_many([{"n": n} for n in range(27)] + [{"bad": True}] * 3)
            wait_for(lambda: row_at(t0 + 80, 67, 3), "30 more at t0 + 80 s")
            # the last minute only (27 over the 60 s since the refresh the dashboard saw
            # at t0 + 20 s), not the worker's life (67 over 80 s)
            page = client.get("/queues/mail").text
            assert card(page, "done (1 min)") == "27.0/min"
            assert card(page, "dead-lettered (1 min)") == "3.0/min"
            assert card(page, "retried (1 min)") == "0"
            assert done_cell(client.get("/").text, "mail") == "27.0/min"  # the overview's
        # a clean stop removes the row: nothing reports on the queue any more
        assert store.workers() == []
        assert done_cell(client.get("/queues").text, "mail") == ""
        assert card(client.get("/queues/mail").text, "done (1 min)") == "no worker reports"


def test_a_worker_seen_once_that_started_long_ago_has_no_rate_yet(backend: Backend) -> None:
    """A dashboard started beside a running worker shows "…" until the worker's next
    refresh, rather than its average since it started."""
    clock = Clock()
    with backend.migrated(clock=clock) as store:
        done = {"n": 500}
        presence = store.worker_presence(
            ["mail"], 1, lambda: {"mail": {"done": done["n"], "retried": 0, "dead": 0}}
        )
        clock.advance(3600)
        renewal = store.renewal()
        try:
            renewal.beat(presence)
            client = TestClient(create_app(store), follow_redirects=False)
            store.queue("mail").enqueue({"n": 1})
            assert done_cell(client.get("/queues").text, "mail") == "…"
            clock.advance(10)
            done["n"] = 530
            renewal.beat(presence)
            assert done_cell(client.get("/queues").text, "mail") == "3.0/s"
        finally:
            renewal.close()
            presence.leave()
