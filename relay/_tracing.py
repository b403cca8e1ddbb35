"""The handler's span: an OpenTelemetry CONSUMER span per job, child of the span that
was current when the job's event was appended or the job enqueued (docs/adr/0019).

The `traceparent` / `tracestate` headers alkstore wrote at append time (and the relay
copied from the event into the job) become the span's parent, so one trace runs from
the request that appended to the handler that ran. Like alkstore's side, this never
imports OpenTelemetry: with `opentelemetry.trace` not loaded, or no tracer provider set
(nothing would record the span), a job costs one lookup and gets no span. A tracing
failure never fails a job: the handler then runs without a span.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import alkstore

log = logging.getLogger("alkstore.worker")
_MODULE = "opentelemetry.trace"


class _Api:
    """OpenTelemetry's pieces, looked up once it is loaded."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation import tracecontext

        self.context = context
        self.trace = trace
        self.propagator = tracecontext.TraceContextTextMapPropagator()
        self.kind = trace.SpanKind.CONSUMER
        self.error = trace.StatusCode.ERROR
        self._cached: tuple[object, Any] = (None, None)  # (provider, its tracer)

    def tracer(self) -> Any | None:
        """The tracer of the global provider; None while none is set (the proxy records
        nothing)."""
        provider = self.trace.get_tracer_provider()
        if isinstance(provider, self.trace.ProxyTracerProvider):
            return None
        cached_provider, tracer = self._cached
        if cached_provider is not provider:
            tracer = provider.get_tracer("alkstore", alkstore.__version__)
            self._cached = (provider, tracer)
        return tracer


_api: _Api | None = None
_broken = False


def _load() -> _Api | None:
    global _api, _broken
    try:
        _api = _Api()
    except Exception:
        _broken = True
        log.warning("OpenTelemetry is loaded but unusable: handlers run without spans")
    return _api


class Span:
    """A started handler span, attached as the current context of the handler's thread
    (or task); `end` must run there too."""

    __slots__ = ("_api", "_span", "_token")

    def __init__(self, api: _Api, span: Any, token: object) -> None:
        self._api = api
        self._span = span
        self._token = token

    def end(self, outcome: str, reason: str, exc: BaseException | None) -> None:
        """Close the span with the handler's outcome (ack, retry, fail, poison, timeout,
        unknown); any other than ack marks it an error."""
        try:
            span = self._span
            span.set_attribute("alkstore.job.outcome", outcome)
            if outcome != "ack":
                if exc is not None and isinstance(exc, Exception):
                    span.record_exception(exc)
                span.set_status(self._api.trace.Status(self._api.error, reason))
            span.end()
        except Exception:
            log.debug("ending a handler span failed", exc_info=True)
        finally:
            try:
                self._api.context.detach(self._token)
            except Exception:
                pass


def start(job: alkstore.Job[Any]) -> Span | None:
    """Start `job`'s handler span (None when tracing is off or it cannot be made)."""
    api = _api
    if api is None:
        if _MODULE not in sys.modules or _broken:
            return None
        api = _load()
        if api is None:
            return None
    try:
        tracer = api.tracer()
        if tracer is None:
            return None
        headers = job.headers
        parent = api.propagator.extract(headers) if "traceparent" in headers else None
        if parent is None:
            parent = api.context.Context()  # a root span, whatever this thread carried
        attributes: dict[str, Any] = {
            "messaging.system": "alkstore",
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "alkstore.job.attempt": job.attempt,
        }
        if job.type is not None:
            attributes["alkstore.event.type"] = job.type
        if job.position is not None:
            attributes["alkstore.event.position"] = job.position
        span = tracer.start_span(
            f"process {job.queue}", context=parent, kind=api.kind, attributes=attributes
        )
        token = api.context.attach(api.trace.set_span_in_context(span, parent))
    except Exception:
        log.debug("starting a handler span failed; running without one", exc_info=True)
        return None
    return Span(api, span, token)
