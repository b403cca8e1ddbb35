"""The W3C trace context of the current span, into the headers of what is appended or
enqueued (docs/adr/0019).

alkstore never imports OpenTelemetry: a span can only be current once the application
has imported `opentelemetry.trace`, so until that module is loaded every call costs one
dictionary lookup and adds nothing. Once it is, the current span's context goes into
`traceparent` (and `tracestate`), written by OpenTelemetry's own W3C propagator; the
relay copies an event's headers into its jobs, and the worker makes the handler's span
a child of it. Headers the caller passes win over these. Nothing here ever raises: a
tracing failure must not fail an append.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from alkstore import _events

log = logging.getLogger("alkstore.tracing")
_MODULE = "opentelemetry.trace"
Inject = Callable[[dict[str, str]], None]
_inject: Inject | None = None  # the W3C propagator's inject, once OpenTelemetry is loaded
_broken = False  # loading it failed once: never try again


def _load() -> Inject | None:
    global _inject, _broken
    try:
        from opentelemetry.trace.propagation import tracecontext

        _inject = tracecontext.TraceContextTextMapPropagator().inject
    except Exception:  # a broken or partial install: tracing stays off, appends work
        _broken = True
        log.warning("OpenTelemetry is loaded but its propagator is not: no trace context")
    return _inject


def context() -> dict[str, str] | None:
    """{"traceparent": ..., "tracestate"?: ...} of the span current on this thread, or None
    (no span, or OpenTelemetry not loaded)."""
    inject = _inject
    if inject is None:
        if _MODULE not in sys.modules or _broken:
            return None
        inject = _load()
        if inject is None:
            return None
    carrier: dict[str, str] = {}
    try:
        inject(carrier)
    except Exception:
        return None
    return carrier or None


def merged(headers: dict[str, str] | None) -> dict[str, str] | None:
    """`headers` with the current trace context added (the caller's keys win)."""
    if _inject is None and _MODULE not in sys.modules:
        return headers  # the path of every append without OpenTelemetry: one lookup
    found = context()
    if found is None:
        return headers
    if headers:
        found.update(headers)
    return found


def encoded() -> str | None:
    """The current trace context as stored headers JSON (None without one): the headers
    of a job enqueued with no headers of its own."""
    if _inject is None and _MODULE not in sys.modules:
        return None  # the path of every enqueue without OpenTelemetry: one lookup
    found = context()
    if found is None:
        return None
    try:
        raw = _events.codec.encode_headers(found)
    except Exception:
        return None
    return None if raw is None else raw.decode()
