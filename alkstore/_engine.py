"""The seam between the logic and the storage engines.

`Engine` is the contract both engines implement (`alkstore.sqlite` and
`alkstore.postgres`); conformance is checked statically, see
`tests/unit/test_engine_seam.py`. Everything above it (store, log, later queues
and relay) is written once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import cached_property
from typing import Any, Literal, Protocol

from alkstore import _checks, _errors, _events, _tracing, _wake

EventRow = tuple[str, str | None, str | None, str]
"""An encoded event ready to insert: (type, key, headers JSON, payload JSON).

A plain tuple, not a NamedTuple: built and bound on the append hot path, where a
NamedTuple cost apsw about 0.5 µs more per row (a sixth of our layer's cost)."""


JobRow = tuple[
    str, int, int, int, int | None, int, str | None, str | None, str | None, str | None, str
]
"""A job ready to insert by the bulk path (docs/adr/0013): (queue, enqueued_at, priority,
visible_at, expires_at, max_attempts, backoff JSON, dedupe_key, type, headers JSON,
payload JSON); times in absolute epoch ms of the database's clock."""

GroupedRow = tuple[
    str,
    int,
    int,
    int,
    int | None,
    int,
    str | None,
    str | None,
    str | None,
    str | None,
    str,
    str | None,
    str | None,
]
"""A JobRow with the job's key and ordering key (`enqueue_many(group=)`, docs/adr/0021)."""


class KeyTaken(_errors.StorageError):
    """A dedupe key of a bulk insert was taken by a transaction that committed after the
    batch looked (PostgreSQL); the bulk path runs the batch again."""


class AckRefused(_errors.StorageError):
    """A fenced ack sent with COMMIT (`Engine.ack_in`, PostgreSQL) deleted nothing: the
    transaction was rolled back (job.transaction() raises LeaseLost; ADR 0022)."""


class LogEntry:
    """One committed event as read from the log, in log order."""

    __slots__ = ("__dict__", "appended_at", "headers", "key", "position", "raw", "type")

    def __init__(
        self,
        position: int,
        type: str,
        key: str | None,
        headers: dict[str, str],
        raw: bytes | str,
        appended_at: datetime,
    ) -> None:
        self.position = position
        self.type = type
        self.key = key
        self.headers = headers
        self.raw = raw
        self.appended_at = appended_at

    @cached_property
    def payload(self) -> _events.Event:
        """The decoded event (decoded on first access)."""
        return _events.codec.decode(self.type, self.raw)

    def __repr__(self) -> str:
        return f"LogEntry(position={self.position}, type={self.type!r}, key={self.key!r})"


class Reserved(Protocol):
    """A connection kept for one job (see `Engine.reserved`); one thread uses it."""

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a named query atomically; StorageError when the database cannot be reached
        (the next call connects again)."""
        ...

    def close(self) -> None: ...


class Engine(Protocol):
    """What a storage engine provides to the logic above it."""

    @property
    def name(self) -> Literal["sqlite", "postgres"]: ...

    @property
    def namespace(self) -> str: ...

    def migrate(self) -> list[int]:
        """Apply pending migrations (safe to run from many processes); return versions applied."""
        ...

    def pending(self) -> list[int]:
        """The versions of the migrations `migrate()` would apply (none: up to date)."""
        ...

    def ddl(self, *, pending_only: bool) -> str:
        """The DDL `migrate()` would run (all of it, or only what is pending: "" if none)."""
        ...

    def grants(self, roles: Mapping[str, str]) -> str:
        """The GRANTs that give each role (part -> role name) what its part needs
        (PostgreSQL; SQLite has no roles: InvalidArgument). docs/adr/0020."""
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """Open a write transaction; yield the raw driver connection; commit on success.

        Until it ends, every other call of this engine on this thread that touches its
        tables raises TransactionOpen, the nested transaction() too: they would run in a
        transaction of their own (docs/adr/0016). `now_ms` reads no table and is allowed;
        `*_in(conn, ...)` and `insert_*` run in this transaction."""
        ...

    def committed(self) -> None:
        """Called after a store transaction that wrote something has committed."""
        ...

    def insert_events(self, conn: Any, rows: Sequence[EventRow]) -> None:
        """Insert encoded events inside the transaction open on `conn`."""
        ...

    def read(self, after: int, limit: int) -> list[LogEntry]:
        """Committed events with position > after, in log order."""
        ...

    def head(self) -> int:
        """The position of the newest committed event (0 for an empty log)."""
        ...

    def sequence(self) -> None:
        """Make every committed event readable by position (PostgreSQL numbers new
        commits, ADR 0004; SQLite has nothing to do)."""
        ...

    def holdups(self) -> list[tuple[int, float, str, str]]:
        """Open writing transactions an operator may want to see: (pid, age s, state, query).
        Not one that began under a second ago and is running a statement: work in flight,
        such as a claim (docs/adr/0020)."""
        ...

    def hidden_holdups(self) -> int:
        """Open writing transactions whose details this role may not see (PostgreSQL:
        another role's, without pg_read_all_stats); 0 on SQLite."""
        ...

    def backlog(self) -> tuple[int, tuple[int, float, str, str] | None]:
        """(committed events not numbered yet, the oldest open transaction holding appended
        events as (pid, age s, state, query) or None): ADR 0004's backlog, PostgreSQL's;
        (0, None) where commit order is rowid order (SQLite)."""
        ...

    # -- the queue rung: named queries from each engine's sql/queues.sql -------------

    def run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a named query atomically in its own write transaction; return its rows."""
        ...

    def run_in(self, conn: Any, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a named query inside the transaction open on `conn`."""
        ...

    def run_many_in(
        self, conn: Any, name: str, params_seq: Sequence[dict[str, Any]]
    ) -> list[list[tuple[Any, ...]]]:
        """Run a named query once per params inside the transaction on `conn`; rows of each."""
        ...

    def ack_in(self, conn: Any, job_id: int, token: int | None) -> bool | None:
        """Ack a job inside the transaction on `conn`, fenced by its lease token (ADR 0022):
        True (deleted), False (the claim no longer holds it), or None: sent with COMMIT
        (PostgreSQL's pipeline), whose exit then raises AckRefused if it deleted nothing."""
        ...

    @property
    def bulk_min(self) -> int:
        """The smallest batch `insert_jobs` is faster for (smaller: one statement a job)."""
        ...

    def insert_jobs(
        self, conn: Any, rows: Sequence[JobRow] | Sequence[GroupedRow], *, grouped: bool = False
    ) -> list[int]:
        """Insert jobs inside the transaction on `conn`, with ids in the order of `rows`;
        their dedupe keys were free when `bulk_start` looked (KeyTaken if one is not now).
        `grouped`: the rows are GroupedRows."""
        ...

    def sweep_lock(self, now_ms: int | None) -> AbstractContextManager[bool]:
        """Hold the namespace's sweep lock for the block; yields False if another holds it."""
        ...

    def now_ms(self) -> int:
        """The database's clock, in epoch milliseconds (ADR 0012)."""
        ...

    def reserved(self) -> Reserved:
        """A connection of its own for work that must not wait behind the application's
        (lease renewal): never from the pool, and first in line for SQLite's write lock."""
        ...

    @property
    def wake(self) -> _wake.Wake: ...

    def close(self) -> None: ...


BATCH_ENCODE_MIN = 32  # events from which one encode_lines call beats one encode each


def batched_rows(
    events: Sequence[_events.Event], key: str | None, headers: dict[str, str] | None, limit: int
) -> Iterable[EventRow]:
    """Encode events with the process codec (errors surface before any SQL runs), each at
    most `limit` bytes (PayloadTooLarge). Many are encoded in one call (docs/adr/0013); a
    failure there is retried one by one, for the error of the event that fails."""
    codec = _events.codec
    raw_headers = codec.encode_headers(_tracing.merged(headers))  # ADR 0019
    encoded_headers = raw_headers.decode() if raw_headers is not None else None
    kinds = set(map(type, events))
    if len(events) >= BATCH_ENCODE_MIN and all(issubclass(k, _events.Event) for k in kinds):
        names = {kind: codec.name_of(kind) for kind in kinds}
        try:
            blob = codec.encode_lines(events)
        except _errors.EventError:
            pass
        else:
            texts = blob.decode().split("\n")
            texts.pop()  # every line ends with a newline; JSON text never holds one
            if len(blob) - len(texts) > limit:  # then one of them may be too large
                for event, line in zip(events, blob.split(b"\n"), strict=False):
                    if len(line) > limit:
                        raise _errors.PayloadTooLarge(len(line), limit, names[type(event)])
            return [
                (names[type(event)], key, encoded_headers, text)
                for event, text in zip(events, texts, strict=True)
            ]
    rows: list[EventRow] = []
    for event in events:
        name, payload = codec.encode(event)
        if len(payload) > limit // 4 and _checks.size(payload) > limit:
            raise _errors.PayloadTooLarge(_checks.size(payload), limit, name)
        rows.append((name, key, encoded_headers, payload))
    return rows


def check_key(key: object) -> str | None:
    if key is None or (type(key) is str and "\x00" not in key):
        return key
    if not isinstance(key, str):
        raise _errors.InvalidArgument(f"key must be a str or None, got {type(key).__name__}")
    return _checks.no_nul("key", key)
