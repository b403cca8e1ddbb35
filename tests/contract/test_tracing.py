"""Trace context from the append to the handler (docs/adr/0019), on both engines: the span
current at append or enqueue time goes into the headers as W3C `traceparent`, and the
worker's handler span is its child; without OpenTelemetry nothing changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import alkstore
import relay
import relay._tracing
from tests.conftest import Backend
from tests.events import OrderPlaced
from tests.processes import ROOT
from tests.worker_support import POLL, drain


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The SDK recording into memory (the global provider can be set once per process)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()  # later tests' spans are dropped


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def handler_spans(exporter: InMemorySpanExporter, queue: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == f"process {queue}"]


def traceparent(span: trace.Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_the_handler_span_is_a_child_of_the_span_that_appended(
    store: alkstore.Store, spans: InMemorySpanExporter
) -> None:
    store.subscribe("traced", ["test.*"], start="beginning")
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("POST /orders") as request:
        with store.transaction() as tx:
            tx.append(OrderPlaced(order_id=1), key="order-1")
    with store.transaction() as tx:
        tx.append(OrderPlaced(order_id=2))  # no span current: no context, a root span
    assert [e.headers for e in store.log.read()] == [{"traceparent": traceparent(request)}, {}]
    store.relay_batch()
    worker = relay.Worker(store, poll=POLL)
    inside: dict[int, trace.SpanContext] = {}
    ids: dict[int, int] = {}

    @worker.handler("traced")
    def handle(job: alkstore.Job[OrderPlaced]) -> None:
        inside[job.payload.order_id] = trace.get_current_span().get_span_context()
        ids[job.payload.order_id] = job.id

    drain(worker)
    first, second = sorted(
        handler_spans(spans, "traced"),
        key=lambda span: int(str((span.attributes or {})["alkstore.event.position"])),
    )
    parent = request.get_span_context()
    assert first.context is not None and first.parent is not None
    assert first.context.trace_id == parent.trace_id  # one trace, request to handler
    assert first.parent.span_id == parent.span_id
    assert first.kind is SpanKind.CONSUMER
    assert dict(first.attributes or {}) == {
        "messaging.system": "alkstore",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "traced",
        "messaging.message.id": str(ids[1]),
        "alkstore.job.attempt": 1,
        "alkstore.event.type": "test.order_placed",
        "alkstore.event.position": 1,
        "alkstore.job.outcome": "ack",
    }
    assert inside[1] == first.context  # the handler runs inside its span
    assert second.parent is None and second.context is not None
    assert second.context.trace_id != parent.trace_id


def test_every_enqueue_path_carries_the_context_and_the_callers_headers_win(
    backend: Backend, store: alkstore.Store, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("tests")
    q = store.queue("direct")
    bulk = store.engine.bulk_min
    with tracer.start_as_current_span("request") as request:
        with store.transaction() as tx:
            tx.enqueue("direct", "tx")
            tx.enqueue("direct", "tx-options", priority=1)
        q.enqueue("plain")
        q.enqueue("own", headers={"traceparent": "mine", "tenant": "a"})
        q.enqueue_many(["small-1", "small-2"])
        q.enqueue_many([f"bulk-{i}" for i in range(bulk)])
        q.enqueue_many([alkstore.JobSpec("spec", headers={"tenant": "b"})])
        conn = backend.raw_connection()
        try:
            with conn if backend.name == "sqlite" else conn.transaction():
                alkstore.append(conn, OrderPlaced(order_id=3), namespace=store.namespace)
        finally:
            conn.close()
    q.enqueue("after")  # no span
    context = traceparent(request)
    headers: dict[str, dict[str, str]] = {}
    while jobs := q.claim_many(100):
        for job in jobs:
            headers[job.payload] = job.headers
            job.ack()
    assert len(headers) == 8 + bulk
    for payload, found in headers.items():
        if payload == "own":
            assert found == {"traceparent": "mine", "tenant": "a"}
        elif payload == "spec":
            assert found == {"traceparent": context, "tenant": "b"}
        elif payload == "after":
            assert found == {}
        else:
            assert found == {"traceparent": context}, payload
    assert store.log.read()[-1].headers == {"traceparent": context}


def test_a_failed_attempt_and_an_async_handler_have_spans_too(
    store: alkstore.Store, spans: InMemorySpanExporter
) -> None:
    q = store.queue("failing")
    q.configure(max_attempts=1)
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request:
        q.enqueue(1)
    worker = relay.Worker(store, poll=POLL)

    @worker.handler("failing")
    async def fail(job: alkstore.Job[int]) -> None:
        raise ValueError("card declined")

    drain(worker)
    [span] = handler_spans(spans, "failing")
    assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: card declined"
    assert [event.name for event in span.events] == ["exception"]
    assert (span.attributes or {})["alkstore.job.outcome"] == "retry"
    assert q.dead_letters()[0].reason == "ValueError: card declined"


def test_a_tracing_failure_fails_neither_the_append_nor_the_job(
    store: alkstore.Store, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("tracing is broken")

    monkeypatch.setattr(alkstore._tracing, "_inject", broken)
    monkeypatch.setattr(relay._tracing._Api, "tracer", broken)
    q = store.queue("robust")
    with trace.get_tracer("tests").start_as_current_span("request"):
        q.enqueue(1)
    worker = relay.Worker(store, poll=POLL)
    done: list[dict[str, str]] = []

    @worker.handler("robust")
    def handle(job: alkstore.Job[int]) -> None:
        done.append(job.headers)

    drain(worker)
    assert done == [{}] and worker.counters["ack"] == 1
    assert handler_spans(spans, "robust") == []


SCRIPT = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import alkstore, relay

class Placed(alkstore.Event, tag="notrace.placed"):
    n: int

store = alkstore.connect(sys.argv[1], namespace=sys.argv[2])
store.subscribe("events", ["notrace.*"], start="beginning")
with store.transaction() as tx:
    tx.append(Placed(n=1))
    tx.enqueue("direct", {"n": 2})
store.queue("direct").enqueue_many([{"n": 3}, {"n": 4}])
store.relay_batch()
worker = relay.Worker(store, poll=0.2)
seen = []
worker.handler("events")(lambda job: seen.append(job.headers))
worker.handler("direct")(lambda job: seen.append(job.headers))
worker.run(once=True)
print(json.dumps({
    "seen": seen,
    "log": [e.headers for e in store.log.read()],
    "loaded": sorted(
        name for name, module in sys.modules.items()
        if module is not None and name.split(".")[0] in ("opentelemetry", "prometheus_client")
    ),
    "timings": worker.counters.timings is not None,
}))
"""


def test_without_opentelemetry_appends_and_jobs_work_and_add_no_header(
    backend: Backend, store: alkstore.Store
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ALKSTORE_DB"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json\n" + textwrap.dedent(SCRIPT),
            backend.url,
            store.namespace,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result == {"seen": [{}, {}, {}, {}], "log": [{}], "loaded": [], "timings": False}
