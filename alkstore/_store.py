"""The Store: one namespace on one database (its transactions: alkstore/_transaction.py)."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Literal

from alkstore import (
    _checks,
    _config,
    _engine,
    _errors,
    _firing,
    _jobs,
    _leases,
    _maintenance,
    _ops,
    _queue,
    _routing,
    _schedules,
    _sinks,
    _status,
    _transaction,
    _wake,
    _workers,
)


class Log:
    """Read access to the committed event log, in log (commit) order."""

    def __init__(self, engine: _engine.Engine) -> None:
        self._engine = engine

    def read(self, after: int = 0, limit: int = 100) -> list[_engine.LogEntry]:
        """Up to `limit` committed events with position > `after`, oldest first."""
        _check_count("after", after, 0)
        _check_count("limit", limit, 1)
        return self._engine.read(after, limit)

    def head(self) -> int:
        """The position of the newest committed event (0 when the log is empty)."""
        return self._engine.head()

    def tail(
        self, after: int = 0, *, batch: int = 500, timeout: float = 1.0, follow: bool = True
    ) -> Iterator[_engine.LogEntry]:
        """The events after `after`, read `batch` at a time (memory stays bounded).

        follow=True: forever, sleeping on the wake (at most `timeout` s) once caught up;
        follow=False: until the end of the log, then stop."""
        _check_count("after", after, 0)
        _check_count("batch", batch, 1)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise _errors.InvalidArgument(f"timeout must be > 0 seconds, got {timeout!r}")
        return self._tail(after, batch, timeout, follow)

    def _tail(
        self, after: int, batch: int, timeout: float, follow: bool
    ) -> Iterator[_engine.LogEntry]:
        listener = self._engine.wake.listener() if follow else None
        while True:
            entries = self.read(after, batch)
            yield from entries
            if entries:
                after = entries[-1].position
            if len(entries) < batch:
                if listener is None:
                    return
                listener.wait(timeout)


def _check_count(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _errors.InvalidArgument(f"{name} must be an int >= {low}, got {value!r}")


class Store:
    """alkstore on one database and namespace. Create it with `alkstore.connect()`."""

    def __init__(
        self,
        engine: _engine.Engine,
        *,
        clock: Callable[[], float] | None = None,
        max_payload_bytes: int = _queue.DEFAULT_MAX_PAYLOAD,
    ) -> None:
        self._engine = engine
        self._runtime = _queue.Runtime(engine, clock, random.Random(), max_payload_bytes)
        self._runtime.transaction = self.transaction  # job.transaction() (ADR 0022)
        self.log = Log(engine)
        self.schedules = _schedules.Schedules(self._runtime)
        """Cron and interval schedules that append events (see docs/adr/0009)."""

    @property
    def random(self) -> random.Random:
        """The random source of backoff jitter (seed it for reproducible schedules)."""
        return self._runtime.random

    def queue(self, name: str) -> _queue.Queue:
        """The durable queue `name` (created on first enqueue; configure with `.configure`)."""
        return _queue.Queue(self._runtime, name)

    def queues(self, *, estimate: bool = False) -> list[_ops.QueueInfo]:
        """Every queue with its counts and pause flag, in name order: declared, subscribed,
        or reached only by `tx.enqueue` or dead letters (docs/adr/0017). `estimate=True`:
        estimated at scale rather than counted (docs/adr/0023)."""
        if estimate:
            return _ops.estimated_queues(self._engine, self._runtime)
        return _ops.queues(self._engine, self._runtime.now_param())

    def job(self, job_id: int) -> _jobs.JobInfo | _jobs.DeadLetter | None:
        """A job by id, whatever its queue: live (JobInfo), dead (DeadLetter) or None."""
        return _ops.find(self._engine, self._runtime.now_param(), job_id)

    # -- routing (the relay's storage half) --------------------------------------

    def subscribe(
        self,
        queue: str,
        events: Iterable[str],
        *,
        start: Literal["now", "beginning"] | int = "now",
        dedupe_by_key: bool = False,
        replace_by_key: bool = False,
        debounce_by_key: float | None = None,
        **queue_options: Any,
    ) -> _routing.Subscription:
        """Route events whose type matches a pattern (`order.*`) into `queue`.

        `start`: "now" (only new events), "beginning" (the whole retained log) or a
        position (delivered from that position on, like `replay`). Re-subscribing
        updates the patterns and keeps the checkpoint. Queue options are stored. Jobs take
        their event's key as dedupe key (ADR 0022) with `dedupe_by_key=True` (a later
        event makes none while one with the key lives), `replace_by_key=True` (it replaces
        the one that waits) or `debounce_by_key=s` (replaces it, due s seconds later)."""
        keyed = (dedupe_by_key, replace_by_key, debounce_by_key)
        return _routing.subscribe(self._runtime, queue, events, start, *keyed, **queue_options)

    def subscribe_sink(
        self,
        name: str,
        sink: str,
        events: Iterable[str],
        *,
        start: Literal["now", "beginning"] | int = "now",
        **options: Any,
    ) -> _sinks.SinkSubscription:
        """Publish events whose type matches a pattern to a broker: `sink` is its URL
        (nats://, redis://, amqp://), `options` the destination (`subject="orders.{type}"`,
        `stream=`, `exchange=`, `routing_key=`) and the sink's settings; `start` as for
        `subscribe`. The relay publishes them (docs/adr/0026); `unsubscribe(name)` ends it."""
        return _sinks.subscribe_sink(self._runtime, name, sink, events, start, **options)

    def sink_subscriptions(self) -> list[_sinks.SinkSubscription]:
        return _sinks.sink_subscriptions(self._runtime)

    def resume_sink(self, name: str) -> bool:
        """Feed a parked sink subscription again, from its checkpoint."""
        return _sinks.resume(self._runtime, name)

    def sink_feed(self) -> _sinks.Feed:
        """The relay's fenced reads and checkpoint moves for sinks (`relay.sinks`)."""
        return _sinks.Feed(self._runtime)

    def unsubscribe(self, queue: str) -> bool:
        return _routing.unsubscribe(self._runtime, queue)

    def subscriptions(self) -> list[_routing.Subscription]:
        return _routing.subscriptions(self._runtime)

    def replay(self, queue: str, from_position: int) -> _routing.Replay:
        """Deliver `queue`'s events from `from_position` on again (at-least-once for
        handlers); never past the log head. Returns how many events that redelivers."""
        return _routing.replay(self._runtime, queue, from_position)

    def lease(self, name: str, ttl: float) -> _routing.Lease:
        """A named lease with a fencing token (leader election among processes)."""
        return _routing.Lease(self._runtime, _config.check_name("lease", name), ttl)

    def relay_batch(
        self, lease: _routing.Lease | None = None, batch: int = 5_000
    ) -> tuple[int, int]:
        """One relay step: (jobs created, events covered). See `relay.Relay` for the loop."""
        return _routing.relay_batch(self._runtime, lease, batch)

    def fire_schedules(self, lease: _routing.Lease | None = None) -> int:
        """Fire every due schedule boundary once (the scheduler runner's tick)."""
        return _firing.tick(self._runtime, lease)

    def prune_schedule_firings(self, older_than: float = 7 * 86_400) -> None:
        """Forget which boundaries fired more than `older_than` seconds ago."""
        _firing.prune_firings(self._runtime, older_than)

    def next_schedule_due(self) -> float | None:
        """Seconds (store clock) until the next schedule boundary; None if none is active."""
        due = _firing.next_due(self._runtime)
        return None if due is None else (due - self._runtime.now_ms()) / 1000

    def prune_log(self, older_than: float) -> int:
        """Delete events older than `older_than` seconds that every subscription passed."""
        return _routing.prune_log(self._runtime, older_than)

    def status(self, *, queues: bool = True) -> _status.Status:
        """What an operator asks first: the log head and (PostgreSQL) the sequencing
        backlog and open writing transactions, each subscription's lag, every queue with
        its counts per state, schedules with their next fire, who leads (relay, scheduler,
        sweeper), the workers, and the retention in effect (docs/adr/0018).
        `queues=False` leaves the queues out (an empty list): counting them reads every
        job; `queues(estimate=True)` does not (docs/adr/0023)."""
        return _status.status(self._runtime, queues=queues)

    def workers(self) -> list[_workers.WorkerInfo]:
        """The worker processes that announced themselves, oldest first: live ones and
        those dead (not seen for 30 s: `alive` False) until the sweep forgets them (1 h)."""
        return _workers.workers(self._runtime)

    def worker_presence(
        self,
        queues: Iterable[str],
        concurrency: int,
        counts: Callable[[], _workers.Counts] | None = None,
    ) -> _workers.Presence:
        """Insert this process's row in the workers table (the worker runtime's; refresh
        it with `Renewal.beat` every `presence.every` seconds, `leave()` when done).
        `counts()`: what it has done since it started, written at each refresh."""
        presence = _workers.Presence(self._runtime, queues, concurrency, counts)
        presence.announce()
        return presence

    @property
    def clock(self) -> Callable[[], float] | None:
        """The injected clock, or None: times are the database's (ADR 0012)."""
        return self._runtime.clock

    def now(self) -> float:
        """The store's time in epoch seconds: the database's clock unless one was injected."""
        return self._runtime.now_ms() / 1000

    def renewal(self) -> _leases.Renewal:
        """Renew many jobs' leases in one statement, on a connection of its own (the
        worker runtime's renewer; ADR 0012)."""
        return _leases.Renewal(self._runtime)

    def sweep(self, retention: _maintenance.Retention | None = None) -> _jobs.SweepResult:
        """Maintenance: dead-letter expired jobs and exhausted expired leases, apply the
        retention policy (None: `alkstore.Retention()`, the defaults: dead letters 14
        days unless their queue says otherwise, events 7 days after every subscription
        passed them), forget workers not seen for an hour. Safe from many processes; one
        runs at a time (docs/adr/0018)."""
        policy = _maintenance.Retention() if retention is None else retention
        if not isinstance(policy, _maintenance.Retention):
            raise _errors.InvalidArgument(
                f"retention must be an alkstore.Retention, got {type(retention).__name__}"
            )
        return _maintenance.sweep(self._runtime, policy)

    @property
    def engine(self) -> _engine.Engine:
        return self._engine

    @property
    def namespace(self) -> str:
        return self._engine.namespace

    def migrate(self) -> list[int]:
        """Create or upgrade alkstore's tables; idempotent and safe to run concurrently.
        A database a newer alkstore migrated raises SchemaTooNew (docs/adr/0002)."""
        return self._engine.migrate()

    def sql(self, *, pending_only: bool = False) -> str:
        """The DDL that `migrate()` runs, for review; applies nothing. With
        pending_only=True, only what this database still needs ("" when up to date)."""
        return self._engine.ddl(pending_only=pending_only)

    def grants(
        self,
        *,
        admin: str | None = None,
        producer: str | None = None,
        worker: str | None = None,
        relay: str | None = None,
        reader: str | None = None,
    ) -> str:
        """The GRANTs of least privilege for the roles named, one per part (PostgreSQL):
        SQL to review and apply after `migrate()` (docs/adr/0020)."""
        parts = {"admin": admin, "producer": producer, "worker": worker, "relay": relay}
        parts["reader"] = reader
        return self._engine.grants({k: v for k, v in parts.items() if v is not None})

    def check(self) -> None:
        """Raise unless the database can be reached (StorageError) and alkstore's tables
        are up to date (NotMigrated). Every alkstore process runs it when it starts."""
        pending = self._engine.pending()
        if pending:
            versions = ", ".join(f"{v:04d}" for v in pending)
            raise _errors.NotMigrated(
                f"alkstore's tables are missing or out of date in namespace "
                f"{self.namespace!r} (migrations {versions} pending): run `alkstore migrate` "
                "or store.migrate()"
            )

    def transaction(self) -> AbstractContextManager[_transaction.Transaction]:
        """Open a transaction; commit on normal exit, roll back on an exception."""
        return _transaction.Scope(self._runtime)

    def listen(self) -> _wake.Listener:
        """A listener whose `wait(timeout)` returns when something new may be committed."""
        return self._engine.wake.listener()

    def close(self) -> None:
        self._engine.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<alkstore.Store {self._engine.name} namespace={self.namespace!r}>"


def connect(
    url: str | None = None,
    *,
    namespace: str | None = None,
    pool_size: int = 10,
    clock: Callable[[], float] | None = None,
    max_payload_bytes: int = _queue.DEFAULT_MAX_PAYLOAD,
    connect_timeout: float = 5.0,
    pooler: bool | None = None,
    listen_url: str | None = None,
) -> Store:
    """Open a store: `sqlite:///app.db`, `sqlite:///:memory:` or `postgresql://...`.

    With no URL: `$ALKSTORE_DB`, else the embedded `sqlite:///alkstore.db`. With no
    namespace: `$ALKSTORE_NAMESPACE`, else "alkstore".
    Bad URLs and namespaces raise before anything touches a database; a database a
    newer alkstore migrated raises SchemaTooNew (upgrade alkstore first, docs/adr/0002).
    Every time that decides who owns a job or when it runs (leases, delays, backoff,
    schedule boundaries) is the database's clock; `clock` (epoch seconds) replaces it,
    for tests.
    `connect_timeout` (PostgreSQL, seconds): how long any connection attempt may
    take before it fails with StorageError (libpq: whole seconds, at least 2); a
    `connect_timeout` in the URL wins. Connections also get TCP keepalives, so a
    silent server breaks them instead of hanging a statement (docs/adr/0001).
    `pooler` (PostgreSQL): the URL goes through a connection pooler in transaction mode
    (PgBouncer): alkstore then leaves nothing on a session (no SET, no prepared
    statement, no LISTEN). None: the URL's `pooler=true|false`, else detected at connect.
    `listen_url` (PostgreSQL): a URL that reaches the server directly, for LISTEN; with
    no URL given, `$ALKSTORE_LISTEN_DB`. Behind a pooler without one, wakes are off and
    consumers re-poll (a WARNING says so). See docs/adr/0020.
    """
    if (
        isinstance(connect_timeout, bool)
        or not isinstance(connect_timeout, int | float)
        or not math.isfinite(connect_timeout)
        or connect_timeout <= 0
    ):
        raise _errors.InvalidArgument(
            f"connect_timeout must be a positive number of seconds, got {connect_timeout!r}"
        )
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise _errors.InvalidArgument(f"pool_size must be an int >= 1, got {pool_size!r}")
    _checks.payload_limit(max_payload_bytes)
    if pooler is not None and not isinstance(pooler, bool):
        raise _errors.InvalidArgument(f"pooler must be True, False or None, got {pooler!r}")
    if listen_url is None and url is None:
        listen_url = os.environ.get("ALKSTORE_LISTEN_DB") or None
        from_env = True
    else:
        from_env = False
    target = _config.parse_url(url)
    namespace = _config.namespace_or_default(namespace)
    engine: _engine.Engine
    if target.engine == "sqlite":
        from alkstore import sqlite

        if pooler is not None or (listen_url is not None and not from_env):
            raise _errors.InvalidArgument(
                "pooler and listen_url are PostgreSQL options; SQLite has neither"
            )
        engine = sqlite.SqliteEngine(target.path, namespace)
    else:
        from alkstore import postgres

        if listen_url is not None and _config.parse_url(listen_url).engine != "postgres":
            raise _errors.InvalidURL(listen_url, "listen_url must be a postgresql:// URL")
        engine = postgres.PostgresEngine(
            target.url,
            namespace,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            pooler=pooler,
            listen_url=listen_url,
        )
    return Store(engine, clock=clock, max_payload_bytes=max_payload_bytes)
