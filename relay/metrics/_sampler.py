"""The cluster-wide gauges (log head, relay lag, queue depths), sampled on a slow cadence
by one process per namespace: the holder of the namespace's "metrics" lease.

Every exporting process campaigns for the lease each `every` seconds; the holder reads
`store.status()` and each known queue's `stats()` and exports them, the others export
none, so the series of a namespace come from one process at a time and a sum over
instances stays right. The lease and a sample last `hold(every)` (three cadences plus
SLACK seconds, so a slow sample never lets the lease lapse): a process that lost the
lease drops its sample at its next round, one whose database hangs stops reporting
stale values when its sample grows older than that (docs/adr/0019).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import alkstore

log = logging.getLogger("alkstore.metrics")
LEASE = "metrics"
SLACK = 10.0  # seconds a sample may take on top of three cadences


def hold(every: float) -> float:
    """How long the sampling lease, and a sample, last."""
    return 3 * every + SLACK


@dataclass(frozen=True)
class Sample:
    """What the lease holder read, at `taken` (time.monotonic())."""

    namespace: str
    taken: float
    status: alkstore.Status
    depths: dict[str, alkstore.QueueStats] = field(default_factory=dict)


class Sampler:
    """Samples every store `stores()` names (each once, by identity), every `every` s."""

    def __init__(
        self,
        every: float,
        stores: Callable[[], Iterable[alkstore.Store]],
        queues: Callable[[alkstore.Store], Iterable[str]],
    ) -> None:
        self.every = every
        self._stores = stores
        self._queues = queues
        self._leases: dict[int, tuple[alkstore.Store, alkstore.Lease]] = {}
        self._samples: dict[int, Sample] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for _store, lease in self._leases.values():
            if lease.token is not None:
                try:
                    lease.release()
                except alkstore.AlkstoreError:
                    pass  # it expires on its own

    def samples(self) -> list[Sample]:
        """The fresh samples (taken within `hold(every)`)."""
        fresh_after = time.monotonic() - hold(self.every)
        with self._lock:
            return [s for s in self._samples.values() if s.taken >= fresh_after]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.every)

    def tick(self) -> None:
        """One round: campaign for each store's lease and sample those held."""
        seen: dict[int, alkstore.Store] = {}
        for store in self._stores():
            seen.setdefault(id(store), store)
        for key in list(self._leases):
            if key not in seen:  # a store no process uses any more
                del self._leases[key]
                with self._lock:
                    self._samples.pop(key, None)
        for key, store in seen.items():
            sample = None
            try:
                if self._lead(key, store):
                    sample = self._sample(store)
            except Exception as exc:  # a closed store, a database away: no sample this time
                log.debug("metrics sample of namespace %s failed: %s", store.namespace, exc)
            with self._lock:
                if sample is None:
                    self._samples.pop(key, None)
                else:
                    self._samples[key] = sample

    def _lead(self, key: int, store: alkstore.Store) -> bool:
        held = self._leases.get(key)
        if held is None or held[0] is not store:
            held = self._leases[key] = (store, store.lease(LEASE, ttl=hold(self.every)))
        lease = held[1]
        return lease.renew() or lease.acquire()

    def _sample(self, store: alkstore.Store) -> Sample:
        status = store.status()
        names = {lag.queue for lag in status.subscriptions if lag.sink is None}  # ADR 0026
        names.update(self._queues(store))
        depths = {name: store.queue(name).stats() for name in sorted(names)}
        return Sample(store.namespace, time.monotonic(), status, depths)
