"""Structured log records (docs/adr/0019): every per-job record carries `record.alkstore`
with the queue, job id, attempt, event type and position; a relay batch is one DEBUG
record with its counts."""

from __future__ import annotations

import logging

import pytest

import alkstore
import relay
from tests.events import OrderPlaced
from tests.worker_support import POLL, drain


def test_a_dead_lettered_event_job_logs_its_event_type_and_position(
    store: alkstore.Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.subscribe("logged", ["test.*"], start="beginning", max_attempts=1)
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=1))
    store.relay_batch()
    worker = relay.Worker(store, poll=POLL)

    @worker.handler("logged")
    def boom(job: alkstore.Job[OrderPlaced]) -> None:
        raise relay.Fail("no such customer")

    with caplog.at_level(logging.INFO, logger="alkstore.worker"):
        drain(worker)
    [record] = [r for r in caplog.records if hasattr(r, "alkstore")]
    assert record.levelno == logging.ERROR
    fields = record.alkstore
    assert {k: v for k, v in fields.items() if k != "job_id"} == {
        "queue": "logged",
        "attempt": 1,
        "max_attempts": 1,
        "event_type": "test.order_placed",
        "position": 1,
        "outcome": "fail",
        "reason": "no such customer",
    }
    assert fields["job_id"] == store.queue("logged").dead_letters()[0].id


def test_a_relay_batch_is_one_debug_record_with_its_counts(
    store: alkstore.Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.subscribe("a", ["test.*"], start="beginning")
    store.subscribe("b", ["test.*"], start="beginning")
    with store.transaction() as tx:
        tx.append_many([OrderPlaced(order_id=i) for i in range(3)])
    process = relay.Relay(store)
    with caplog.at_level(logging.DEBUG, logger="alkstore.relay"):
        process.step()
    process.lease.release()
    [record] = [r for r in caplog.records if hasattr(r, "alkstore")]
    assert record.levelno == logging.DEBUG
    assert record.getMessage() == "relayed 3 events into 6 jobs"
    assert record.alkstore == {"events": 3, "jobs": 6}
