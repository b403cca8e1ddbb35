"""`store.transaction()`: an open write transaction whose business writes, appended events
and enqueued jobs commit together (docs/adr/0001, 0010)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, overload

from alkstore import (
    _checks,
    _config,
    _effects,
    _encoding,
    _engine,
    _errors,
    _events,
    _queue,
    _tracing,
    observe,
)


class Transaction:
    """An open write transaction: your business writes and appended events commit together."""

    def __init__(self, runtime: _queue.Runtime, connection: Any) -> None:
        self._runtime = runtime
        self._engine = runtime.engine
        self.connection = connection
        """The raw driver connection (apsw.Connection or psycopg.Connection)."""
        self.wrote = False
        self._open = True
        self._appended = 0  # counted for alkstore.observe when the transaction commits
        self._queues: list[str] | None = None

    def append(
        self,
        event: _events.Event,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Append one event; it becomes visible in the log when the transaction commits.

        Encoding errors raise here. On PostgreSQL the INSERT travels with your next
        statement or with COMMIT (no round trip of its own), so a database error of
        the INSERT itself raises there (docs/adr/0010)."""
        if not self._open:
            raise RuntimeError("this transaction has ended")
        codec = _events.codec
        name, payload = codec.encode(event)
        limit = self._runtime.max_payload_bytes
        if len(payload) > limit // 4 and _checks.size(payload) > limit:
            raise _errors.PayloadTooLarge(_checks.size(payload), limit, name)
        headers = _tracing.merged(headers)  # the current span's trace context (ADR 0019)
        raw_headers = codec.encode_headers(headers) if headers else None
        row: _engine.EventRow = (
            name,
            _engine.check_key(key),
            raw_headers.decode() if raw_headers is not None else None,
            payload,
        )
        self._engine.insert_events(self.connection, (row,))
        self.wrote = True
        self._appended += 1

    def append_many(
        self,
        events: Iterable[_events.Event],
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Append events in order, all with the same key and headers."""
        if not self._open:
            raise RuntimeError("this transaction has ended")
        limit = self._runtime.max_payload_bytes
        rows = list(_engine.batched_rows(list(events), _engine.check_key(key), headers, limit))
        if rows:
            self._engine.insert_events(self.connection, rows)
            self.wrote = True
            self._appended += len(rows)

    @overload
    def enqueue(
        self, queue: str, payload: object, *, on_duplicate: Literal["raise"] = ..., **options: Any
    ) -> int: ...
    @overload
    def enqueue(
        self, queue: str, payload: object, *, on_duplicate: Literal["ignore"], **options: Any
    ) -> int | None: ...
    @overload
    def enqueue(
        self, queue: str, payload: object, *, on_duplicate: Literal["replace"], **options: Any
    ) -> int: ...
    def enqueue(
        self,
        queue: str,
        payload: object,
        *,
        on_duplicate: _encoding.OnDuplicate = "raise",
        **options: Any,
    ) -> int | None:
        """Enqueue a job that exists only if this transaction commits; returns its id.

        Options as `Queue.enqueue`. A duplicate dedupe_key raises DuplicateJob without
        aborting the transaction (or returns None with on_duplicate="ignore").
        """
        if not self._open:
            raise RuntimeError("this transaction has ended")
        if options:
            params = _encoding.enqueue_params(self._runtime, queue, payload, **options)
            name = _encoding.enqueue_query(params)
        else:  # the hot path, as q.enqueue's: every option at its default
            params = _encoding.plain_params(
                self._runtime, _config.check_name("queue", queue), payload
            )
            name = "enqueue"
        if on_duplicate == "replace":  # debounce / replace (ADR 0022)
            job_id: int | None = _effects.replace_in(self._engine, self.connection, params)
        else:
            rows = self._engine.run_in(self.connection, name, params)
            job_id = _encoding.check_duplicate(rows, params, on_duplicate)
        self.wrote = True
        if observe.counts is not None and job_id is not None:
            if self._queues is None:
                self._queues = []
            self._queues.append(params["queue"])
        return job_id


class Scope:
    """`store.transaction()`: a plain context manager around the engine's transaction
    (no generator of its own: it is on the path of every business transaction)."""

    __slots__ = ("_inner", "_runtime", "_tx")

    def __init__(self, runtime: _queue.Runtime) -> None:
        self._runtime = runtime
        self._inner = runtime.engine.transaction()

    def __enter__(self) -> Transaction:
        self._tx = Transaction(self._runtime, self._inner.__enter__())
        return self._tx

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        tx = self._tx
        tx._open = False
        self._inner.__exit__(exc_type, exc, tb)
        if tx.wrote and exc_type is None:
            self._runtime.engine.committed()
            counts = observe.counts
            if counts is not None:
                counts.add(self._runtime.engine.namespace, tx._appended, tx._queues or ())
