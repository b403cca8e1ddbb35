"""Prometheus metrics for alkstore's processes: `relay.metrics.serve(port)` (docs/adr/0019).

    import relay.metrics
    server = relay.metrics.serve(9100)   # http://host:9100/metrics
    worker.run()

It exports, for every Worker, Relay and Scheduler of this Python process (whenever made):
jobs claimed / acked / retried / dead-lettered / released, lease renewals and lapses and
handler durations per queue; events relayed and jobs the relay made; schedule firings;
who leads; database errors retried ("reconnects"); the events appended and jobs enqueued
by this process. The process that holds the namespace's "metrics" lease also exports the
log head, each subscription's lag (events and seconds) and each queue's depth by state,
sampled every `sample_every` seconds. Needs the `metrics` extra
(`pip install 'alkstore[metrics]'`, prometheus_client); nothing imports it until `serve`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import alkstore
from alkstore import observe
from relay.metrics import _sampler, _sources

log = logging.getLogger("alkstore.metrics")
SAMPLE_EVERY = 15.0  # seconds between samples of the cluster-wide gauges


class MetricsUnavailable(alkstore.ConfigurationError):
    """Metrics need prometheus_client: `pip install 'alkstore[metrics]'`."""


class Server:
    """A running metrics endpoint; `close()` stops it (and its sampler)."""

    def __init__(self, http: Any, thread: Any, sampler: _sampler.Sampler, registry: Any) -> None:
        self._http = http
        self._thread = thread
        self._registry = registry
        self._collector: Any = None
        self._closed = False
        self.sampler = sampler

    @property
    def port(self) -> int:
        """The port it listens on (the one the OS chose when asked for port 0)."""
        return int(self._http.server_port)

    @property
    def url(self) -> str:
        host = self._http.server_address[0]
        if host in ("", "0.0.0.0", "::"):
            host = "localhost"
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._http.shutdown()
        self._http.server_close()
        self.sampler.stop()
        if self._collector is not None:
            self._registry.unregister(self._collector)
            self._collector = None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    port: int,
    addr: str = "0.0.0.0",
    *,
    stores: Iterable[alkstore.Store] = (),
    queues: Iterable[str] = (),
    sample_every: float = SAMPLE_EVERY,
    registry: Any = None,
) -> Server:
    """Serve this process's metrics at http://addr:port/metrics (port 0: any free port,
    see `Server.port`) until `close()`.

    The cluster-wide gauges are sampled for the stores of this process's workers,
    relays and schedulers, and for `stores`; the queues sampled are the subscriptions'
    and the workers' handlers', and `queues` (e.g. ones fed only by tx.enqueue).
    `registry`: a prometheus_client CollectorRegistry (default: the global REGISTRY,
    with the process and platform collectors and your own metrics).
    Raises MetricsUnavailable without prometheus_client, ConfigurationError when the
    address cannot be bound."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise alkstore.InvalidArgument(f"port must be an int in 0..65535, got {port!r}")
    if not (isinstance(sample_every, int | float) and sample_every > 0):
        raise alkstore.InvalidArgument(f"sample_every must be > 0 seconds, got {sample_every!r}")
    try:
        import prometheus_client

        from relay.metrics import _families
    except ImportError as exc:
        raise MetricsUnavailable(
            f"metrics need prometheus_client ({exc}): pip install 'alkstore[metrics]'"
        ) from None
    registry = prometheus_client.REGISTRY if registry is None else registry
    extra_stores, extra_queues = list(stores), set(queues)
    sampler = _sampler.Sampler(
        sample_every,
        lambda: [*extra_stores, *_process_stores()],
        lambda store: extra_queues | _handler_queues(store),
    )
    try:
        http, thread = prometheus_client.start_http_server(port, addr, registry=registry)
    except OSError as exc:
        raise alkstore.ConfigurationError(
            f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}"
        ) from None
    server = Server(http, thread, sampler, registry)
    observe.enable()
    _sources.start_timing()
    collector = _families.Families(sampler)
    registry.register(collector)
    server._collector = collector
    sampler.start()
    log.info("metrics on %s", server.url)
    return server


def _process_stores() -> list[alkstore.Store]:
    found: list[alkstore.Store] = [w.store for w in _sources.workers()]
    found += [r.store for r in _sources.relays()]
    found += [s.store for s in _sources.schedulers()]
    return found


def _handler_queues(store: alkstore.Store) -> set[str]:
    return {q for w in _sources.workers() if w.store is store for q in w.handlers}


__all__ = ["MetricsUnavailable", "Server", "serve"]
