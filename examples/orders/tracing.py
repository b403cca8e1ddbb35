"""Traces, when OpenTelemetry is installed (`pip install 'alkstore[otel]' opentelemetry-sdk`).

An order's HTTP request is a span; the append inside it carries the span's context in
the event's headers (W3C traceparent, docs/adr/0019), the relay copies the headers into
the job, and the worker's span for the job is that span's child: one trace from the
request to the confirmation mail. `--trace` records the spans in memory and prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

try:
    from opentelemetry import trace
except ImportError:  # the extra is not installed: no spans, nothing else changes
    trace = None  # type: ignore[assignment]


def traced(name: str, fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) inside a server span `name` (no span without OpenTelemetry)."""
    if trace is None:
        return fn(*args)
    tracer = trace.get_tracer("examples.orders")
    with tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER):
        return fn(*args)


def record() -> Any:
    """Install the SDK's tracer provider with an in-memory exporter; returns the exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert trace is not None, "--trace needs opentelemetry-api and opentelemetry-sdk"
    trace.set_tracer_provider(provider)
    return exporter


def show(exporter: Any) -> None:
    """One line per finished span: name, trace id, span id, parent span id."""
    for span in exporter.get_finished_spans():
        parent = f"{span.parent.span_id:016x}" if span.parent is not None else "-"
        print(
            f"span {span.name!r} trace={span.context.trace_id:032x} "
            f"id={span.context.span_id:016x} parent={parent}"
        )
