"""The metric families, made when Prometheus scrapes: read from the counters the
processes keep anyway, the process's append and enqueue counts, and the sampler's
latest cluster-wide sample (docs/adr/0019). Imported only by `relay.metrics.serve`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from alkstore import observe
from relay.metrics import _sampler, _sources

NS = ["namespace"]
QUEUE = ["namespace", "queue"]

# name, help, the worker counters it adds up (by_queue names; "-x" subtracts x)
_WORKER_FAMILIES: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "alkstore_jobs_claimed",
        "Jobs this process claimed (prefetched ones included).",
        ("claimed",),
    ),
    ("alkstore_jobs_acked", "Jobs whose handler returned and whose ack was stored.", ("ack",)),
    (
        "alkstore_jobs_retried",
        "Failed attempts (exception, relay.Retry, timeout) put back on the backoff curve.",
        ("retry", "timeout", "-dead"),  # "dead": the last attempt failed, not retried
    ),
    (
        "alkstore_jobs_dead_lettered",
        "Jobs moved to the dead letters: last attempt failed, relay.Fail, or poison.",
        ("dead", "fail", "poison"),
    ),
    (
        "alkstore_jobs_released",
        "Jobs given back without counting an attempt (shutdown, prefetched, unknown type, "
        "relay.Snooze).",
        ("released", "returned", "unknown_type", "snoozed"),
    ),
    ("alkstore_lease_renewals", "Job leases renewed by the worker's renewal thread.", ("renewed",)),
    (
        "alkstore_lease_lapses",
        "Job leases found lost (taken over after they ran out); the result is dropped.",
        ("lease_lost",),
    ),
]


class Families(Collector):
    """A prometheus_client collector over this process's alkstore processes."""

    def __init__(self, sampler: _sampler.Sampler | None) -> None:
        self.sampler = sampler

    def describe(self) -> list[Metric]:
        return []  # no collect() at registration: the names are fixed, no clash to check

    def collect(self) -> Iterator[Metric]:
        yield from self._workers()
        yield from self._relays()
        yield from self._produced()
        if self.sampler is not None:
            yield from self._sampled(self.sampler.samples())

    def _workers(self) -> Iterator[Metric]:
        per_queue: Counter[tuple[str, str, str]] = Counter()  # (namespace, queue, name)
        reconnects: Counter[tuple[str, str]] = Counter()
        durations = HistogramMetricFamily(
            "alkstore_handler_duration_seconds",
            "Seconds from handler start to its return, per queue.",
            labels=QUEUE,
        )
        for worker in _sources.workers():
            namespace = worker.store.namespace
            for (queue, name), n in worker.counters.per_queue().items():
                per_queue[namespace, queue, name] += n
            reconnects[namespace, "worker"] += worker.counters["reconnect"]
            timings = worker.counters.timings
            if timings is not None:
                for queue, (buckets, total) in timings.snapshot().items():
                    durations.add_metric([namespace, queue], buckets, total)
        queues = sorted({(ns, q) for ns, q, _ in per_queue})
        for name, text, parts in _WORKER_FAMILIES:
            family = CounterMetricFamily(name, text, labels=QUEUE)
            for ns, queue in queues:
                value = 0
                for part in parts:
                    if part.startswith("-"):
                        value -= per_queue[ns, queue, part[1:]]
                    else:
                        value += per_queue[ns, queue, part]
                family.add_metric([ns, queue], max(0, value))
            yield family
        yield durations
        for relay in _sources.relays():
            reconnects[relay.store.namespace, "relay"] += relay.reconnects
        for scheduler in _sources.schedulers():
            reconnects[scheduler.store.namespace, "scheduler"] += scheduler.reconnects
        family = CounterMetricFamily(
            "alkstore_reconnects",
            "Database errors a process retried (a broken connection is replaced on retry).",
            labels=["namespace", "process"],
        )
        for (ns, process), n in sorted(reconnects.items()):
            family.add_metric([ns, process], n)
        yield family

    def _relays(self) -> Iterator[Metric]:
        relayed = CounterMetricFamily(
            "alkstore_events_relayed", "Log events the relay turned into jobs.", labels=NS
        )
        created = CounterMetricFamily(
            "alkstore_relay_jobs_created", "Jobs the relay made from events.", labels=NS
        )
        fired = CounterMetricFamily(
            "alkstore_schedule_firings",
            "Schedule boundaries fired (by a scheduler, or a relay's embedded one).",
            labels=NS,
        )
        leader = GaugeMetricFamily(
            "alkstore_leader",
            "1 while this process holds the role's lease (relay, scheduler).",
            labels=["namespace", "role"],
        )
        sent = CounterMetricFamily(
            "alkstore_sink_messages_published",
            "Messages a broker confirmed for sink subscriptions (docs/adr/0026).",
            labels=NS,
        )
        dropped = CounterMetricFamily(
            "alkstore_sink_duplicates_dropped",
            "Of those, republished messages the broker dropped as duplicates.",
            labels=NS,
        )
        retried = CounterMetricFamily(
            "alkstore_sink_publish_failures",
            "Sink batches not wholly confirmed and retried after a backoff.",
            labels=NS,
        )
        totals: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
        sinks: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        firings: Counter[str] = Counter()
        for relay in _sources.relays():
            ns = relay.store.namespace
            totals[ns][0] += relay.relayed_events
            totals[ns][1] += relay.created_jobs
            sinks[ns][0] += relay.sinks.published
            sinks[ns][1] += relay.sinks.duplicates
            sinks[ns][2] += relay.sinks.retries
            firings[ns] += relay.fired  # its embedded scheduler
            leader.add_metric([ns, "relay"], 1 if relay.is_leader else 0)
        for ns, (events, jobs) in sorted(totals.items()):
            relayed.add_metric([ns], events)
            created.add_metric([ns], jobs)
        for ns, (published, duplicates, failures) in sorted(sinks.items()):
            sent.add_metric([ns], published)
            dropped.add_metric([ns], duplicates)
            retried.add_metric([ns], failures)
        for scheduler in _sources.schedulers():
            ns = scheduler.store.namespace
            firings[ns] += scheduler.fired
            leader.add_metric([ns, "scheduler"], 0 if scheduler.lease.token is None else 1)
        for ns, n in sorted(firings.items()):
            fired.add_metric([ns], n)
        yield from (relayed, created, fired, leader, sent, dropped, retried)

    def _produced(self) -> Iterator[Metric]:
        appended = CounterMetricFamily(
            "alkstore_events_appended",
            "Events this process appended in store transactions that committed.",
            labels=NS,
        )
        enqueued = CounterMetricFamily(
            "alkstore_jobs_enqueued",
            "Jobs this process enqueued (tx.enqueue, enqueue, enqueue_many) that committed.",
            labels=QUEUE,
        )
        counts = observe.counts
        if counts is not None:
            events, jobs = counts.snapshot()
            for ns, n in sorted(events.items()):
                appended.add_metric([ns], n)
            for (ns, queue), n in sorted(jobs.items()):
                enqueued.add_metric([ns, queue], n)
        yield from (appended, enqueued)

    def _sampled(self, samples: list[_sampler.Sample]) -> Iterator[Metric]:
        head = GaugeMetricFamily(
            "alkstore_log_head",
            "Position of the newest committed event (its growth is the append rate).",
            labels=NS,
        )
        unsequenced = GaugeMetricFamily(
            "alkstore_log_unsequenced",
            "Committed events not numbered yet (PostgreSQL, ADR 0004; 0 on SQLite).",
            labels=NS,
        )
        lag = GaugeMetricFamily(
            "alkstore_relay_lag_events", "Events a subscription is behind the head.", labels=QUEUE
        )
        lag_seconds = GaugeMetricFamily(
            "alkstore_relay_lag_seconds",
            "Age of the oldest event a subscription has not relayed (0: caught up).",
            labels=QUEUE,
        )
        depth = GaugeMetricFamily(
            "alkstore_queue_jobs",
            "Jobs in a queue by state: ready, scheduled, running, dead.",
            labels=[*QUEUE, "state"],
        )
        oldest = GaugeMetricFamily(
            "alkstore_queue_oldest_ready_seconds",
            "Age of the oldest ready job (0: none ready).",
            labels=QUEUE,
        )
        parked = GaugeMetricFamily(
            "alkstore_sink_parked",
            "1 while a sink subscription is parked by a permanent refusal (docs/adr/0026).",
            labels=QUEUE,
        )
        for sample in samples:
            ns, status = sample.namespace, sample.status
            head.add_metric([ns], status.head)
            unsequenced.add_metric([ns], status.unsequenced)
            for sub in status.subscriptions:
                lag.add_metric([ns, sub.queue], sub.events)
                lag_seconds.add_metric([ns, sub.queue], sub.seconds or 0.0)
                if sub.sink is not None:
                    parked.add_metric([ns, sub.queue], 0 if sub.parked is None else 1)
            for queue, stats in sample.depths.items():
                for state, n in (
                    ("ready", stats.ready),
                    ("scheduled", stats.scheduled),
                    ("running", stats.active),
                    ("dead", stats.dead),
                ):
                    depth.add_metric([ns, queue, state], n)
                oldest.add_metric([ns, queue], stats.oldest_ready_age or 0.0)
        yield from (head, unsequenced, lag, lag_seconds, depth, oldest, parked)
