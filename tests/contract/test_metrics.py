"""Prometheus metrics of the processes (docs/adr/0019), scraped over HTTP as Prometheus
does, on both engines: worker counters per queue while a drain runs, the relay's
counters and lag, and gauges sampled by one process per namespace only."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry

import alkstore
import relay
from tests.clock import Clock
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.metrics_support import Samples, scrape, value
from tests.worker_support import POLL, running, wait_until

SAMPLE = 0.2  # seconds between samples of the cluster-wide gauges in these tests


@contextmanager
def serving(stores: Iterable[alkstore.Store] = ()) -> Iterator[relay.metrics.Server]:
    with relay.metrics.serve(
        0, "127.0.0.1", registry=CollectorRegistry(), sample_every=SAMPLE, stores=stores
    ) as server:
        yield server


def until(server: relay.metrics.Server, check: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until `check(samples)` holds; the last scrape."""
    got: list[Samples] = []

    def ok() -> bool:
        got[:] = [scrape(server.url)]
        return check(got[0])

    wait_until(ok, what)
    return got[0]


def test_worker_counters_move_per_queue_while_it_drains(store: alkstore.Store) -> None:
    ns = store.namespace
    emails, flaky = store.queue("emails"), store.queue("flaky")
    flaky.configure(max_attempts=2, backoff=alkstore.Fixed(delay=0))
    release = threading.Event()
    worker = relay.Worker(store, poll=POLL)

    @worker.handler("emails", concurrency=2)
    def send(job: alkstore.Job[int]) -> None:
        if job.payload >= 5:
            release.wait(10)  # held until the test has scraped once

    @worker.handler("flaky")
    def fail(job: alkstore.Job[int]) -> None:
        raise RuntimeError("down")

    def acked(samples: Samples) -> float:
        return value(samples, "alkstore_jobs_acked_total", namespace=ns, queue="emails") or 0

    with serving() as server:
        emails.enqueue_many(range(20))
        flaky.enqueue_many(range(3))
        with running(worker):
            first = until(server, lambda s: acked(s) >= 5, "the first acks")
            release.set()
            last = until(
                server,
                lambda s: (
                    acked(s) == 20
                    and value(s, "alkstore_jobs_dead_lettered_total", namespace=ns, queue="flaky")
                    == 3
                ),
                "the drain",
            )
        sampled = until(
            server,
            lambda s: (
                [
                    value(s, "alkstore_queue_jobs", namespace=ns, queue=q, state=state)
                    for q in ("emails", "flaky")
                    for state in ("ready", "scheduled", "running", "dead")
                ]
                == [0, 0, 0, 0, 0, 0, 0, 3]
            ),
            "a sample of the queues after the drain",
        )
    assert acked(first) < 20  # scraped while it drained: the counter moved
    emails_ = {"namespace": ns, "queue": "emails"}
    flaky_ = {"namespace": ns, "queue": "flaky"}
    assert value(first, "alkstore_jobs_claimed_total", **emails_) >= 7  # type: ignore[operator]
    assert value(last, "alkstore_jobs_claimed_total", **emails_) == 20
    assert value(last, "alkstore_jobs_enqueued_total", **emails_) == 20
    assert value(last, "alkstore_jobs_enqueued_total", **flaky_) == 3
    assert value(last, "alkstore_jobs_retried_total", **flaky_) == 3  # first attempts
    assert value(last, "alkstore_jobs_retried_total", **emails_) == 0
    assert value(last, "alkstore_jobs_dead_lettered_total", **emails_) == 0
    assert value(last, "alkstore_handler_duration_seconds_count", **emails_) == 20
    assert value(last, "alkstore_handler_duration_seconds_bucket", le="+Inf", **emails_) == 20
    assert value(last, "alkstore_handler_duration_seconds_count", **flaky_) == 6
    assert value(last, "alkstore_handler_duration_seconds_sum", **emails_) > 0  # type: ignore[operator]
    assert value(sampled, "alkstore_queue_oldest_ready_seconds", **emails_) == 0


def test_relay_counters_lag_and_leadership(store: alkstore.Store) -> None:
    ns = store.namespace
    store.subscribe("audit", ["test.*"], start="beginning")
    process = relay.Relay(store)
    with serving() as server:
        with store.transaction() as tx:
            for i in range(3):
                tx.append(OrderPlaced(order_id=i))
        behind = until(
            server,
            lambda s: value(s, "alkstore_relay_lag_events", namespace=ns, queue="audit") == 3,
            "the lag sampled",
        )
        assert value(behind, "alkstore_log_head", namespace=ns) == 3
        assert value(behind, "alkstore_events_appended_total", namespace=ns) == 3
        assert value(behind, "alkstore_relay_lag_seconds", namespace=ns, queue="audit") >= 0  # type: ignore[operator]
        assert value(behind, "alkstore_leader", namespace=ns, role="relay") == 0
        assert process.step() is False  # one batch covers the three events
        after = until(
            server,
            lambda s: value(s, "alkstore_relay_lag_events", namespace=ns, queue="audit") == 0,
            "the lag sampled after the relay",
        )
        process.lease.release()
    assert value(after, "alkstore_events_relayed_total", namespace=ns) == 3
    assert value(after, "alkstore_relay_jobs_created_total", namespace=ns) == 3
    assert value(after, "alkstore_relay_lag_seconds", namespace=ns, queue="audit") == 0
    assert value(after, "alkstore_queue_jobs", namespace=ns, queue="audit", state="ready") == 3


def test_the_sampled_gauges_come_from_one_process_per_namespace(backend: Backend) -> None:
    with backend.migrated() as first, backend.connect() as second:
        ns = first.namespace
        first.subscribe("audit", ["test.*"])

        def head(server: relay.metrics.Server) -> float | None:
            return value(scrape(server.url), "alkstore_log_head", namespace=ns)

        with serving(stores=[first]) as one:
            wait_until(lambda: head(one) == 0, "the first exporter's sample")
            with serving(stores=[second]) as two:
                for _ in range(3):  # a few cadences: the second never samples
                    threading.Event().wait(SAMPLE)
                    assert head(two) is None and head(one) == 0
                one.close()  # gives the lease back
                wait_until(lambda: head(two) == 0, "the second exporter taking over")


def test_serve_refuses_a_port_in_use_and_bad_arguments() -> None:
    with serving() as server:
        with pytest.raises(
            alkstore.ConfigurationError, match=f"cannot serve metrics on .*{server.port}"
        ):
            relay.metrics.serve(server.port, "127.0.0.1", registry=CollectorRegistry())
    with pytest.raises(alkstore.InvalidArgument, match="port"):
        relay.metrics.serve(70_000)
    with pytest.raises(alkstore.InvalidArgument, match="sample_every"):
        relay.metrics.serve(0, sample_every=0)


def test_schedule_firings_count_in_the_scheduler_and_in_the_relay(
    sstore: alkstore.Store, clock: Clock
) -> None:
    ns = sstore.namespace
    sstore.schedules.add("beat", every="10s", event=OrderPlaced(order_id=0))
    scheduler, process = relay.Scheduler(sstore), relay.Relay(sstore)
    with serving() as server:
        clock.advance(10)
        assert scheduler.tick() >= 0 and scheduler.fired == 1
        clock.advance(10)
        process.step()
        process._fire_schedules()  # the relay's embedded scheduler, under its lease
        samples = scrape(server.url)
        process.lease.release()
    assert value(samples, "alkstore_schedule_firings_total", namespace=ns) == 2
    assert value(samples, "alkstore_leader", namespace=ns, role="scheduler") == 0
