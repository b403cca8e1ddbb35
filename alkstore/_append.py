"""`alkstore.append` and `alkstore.enqueue`: write into a transaction the application
already holds, on the connection it holds it on (docs/adr/0024)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, overload

import apsw
import psycopg

from alkstore import (
    _checks,
    _config,
    _encoding,
    _engine,
    _errors,
    _events,
    _owned,
    postgres,
    sqlite,
)

DEFAULT_MAX_PAYLOAD = _checks.DEFAULT_MAX_PAYLOAD


def _rows(
    events: Iterable[_events.Event], key: str | None, headers: dict[str, str] | None, limit: int
) -> list[_engine.EventRow]:
    limit = _checks.payload_limit(limit)
    return list(_engine.batched_rows(list(events), _engine.check_key(key), headers, limit))


@overload
def append_many(
    conn: _owned.AsyncHolder,
    events: Iterable[_events.Event],
    *,
    key: str | None = ...,
    headers: dict[str, str] | None = ...,
    namespace: str | None = ...,
    max_payload_bytes: int = ...,
) -> Awaitable[None]: ...
@overload
def append_many(
    conn: _owned.SyncHolder,
    events: Iterable[_events.Event],
    *,
    key: str | None = ...,
    headers: dict[str, str] | None = ...,
    namespace: str | None = ...,
    max_payload_bytes: int = ...,
) -> None: ...
def append_many(
    conn: Any,
    events: Iterable[_events.Event],
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    namespace: str | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
) -> Awaitable[None] | None:
    """Append events on a connection you own, inside the transaction open on it.

    Works on apsw.Connection, psycopg.Connection and psycopg.AsyncConnection, and on
    what holds one: SQLAlchemy's Session, Connection, AsyncSession and AsyncConnection
    (postgresql+psycopg), Django's connection (postgresql backend, psycopg 3); await
    the result on the async kinds (docs/adr/0024). Anything else, SQLite through the
    standard library's sqlite3 included, raises UnsupportedConnection. The events
    commit or roll back with your transaction; with no transaction open this raises
    NotInTransaction, it never autocommits.
    Each event is checked as `tx.append` checks it, before anything is sent:
    InvalidPayload if it would not decode back equal, PayloadTooLarge over
    `max_payload_bytes` (set it as in `alkstore.connect` of the processes that relay).
    `namespace` as `alkstore.connect` takes it: None is $ALKSTORE_NAMESPACE, else
    "alkstore".
    """
    namespace = _config.namespace_or_default(namespace)
    rows = _rows(events, key, headers, max_payload_bytes)
    if isinstance(conn, psycopg.AsyncConnection):
        return postgres.append_on_async(conn, namespace, rows)
    target = _owned.driver(conn)
    if isinstance(target, psycopg.Connection):
        postgres.append_on(target, namespace, rows)
    elif isinstance(target, apsw.Connection):
        sqlite.append_on(target, namespace, rows)
    else:
        return _append_async(target, namespace, rows)
    return None


async def _append_async(
    pending: _owned.Async, namespace: str, rows: list[_engine.EventRow]
) -> None:
    await postgres.append_on_async(await pending, namespace, rows)


@overload
def append(
    conn: _owned.AsyncHolder,
    event: _events.Event,
    *,
    key: str | None = ...,
    headers: dict[str, str] | None = ...,
    namespace: str | None = ...,
    max_payload_bytes: int = ...,
) -> Awaitable[None]: ...
@overload
def append(
    conn: _owned.SyncHolder,
    event: _events.Event,
    *,
    key: str | None = ...,
    headers: dict[str, str] | None = ...,
    namespace: str | None = ...,
    max_payload_bytes: int = ...,
) -> None: ...
def append(
    conn: Any,
    event: _events.Event,
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    namespace: str | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
) -> Awaitable[None] | None:
    """Append one event on a connection you own; see `append_many`."""
    result: Awaitable[None] | None = append_many(
        conn,
        [event],
        key=key,
        headers=headers,
        namespace=namespace,
        max_payload_bytes=max_payload_bytes,
    )
    return result


@dataclass(frozen=True)
class _Settings:
    """What encoding a job needs (`_encoding.Encoding`): the database's clock, and the limit."""

    max_payload_bytes: int
    clock: Callable[[], float] | None = None  # None: the database's clock


@overload
def enqueue(
    conn: _owned.AsyncHolder,
    queue: str,
    payload: object,
    *,
    on_duplicate: _encoding.OnDuplicate = ...,
    namespace: str | None = ...,
    max_payload_bytes: int = ...,
    **options: Any,
) -> Awaitable[int | None]: ...
@overload
def enqueue(
    conn: _owned.SyncHolder,
    queue: str,
    payload: object,
    *,
    on_duplicate: Literal["raise"] = ...,
    namespace: str | None = ...,
    max_payload_bytes: int = ...,
    **options: Any,
) -> int: ...
@overload
def enqueue(
    conn: _owned.SyncHolder,
    queue: str,
    payload: object,
    *,
    on_duplicate: Literal["ignore"],
    namespace: str | None = ...,
    max_payload_bytes: int = ...,
    **options: Any,
) -> int | None: ...
def enqueue(
    conn: Any,
    queue: str,
    payload: object,
    *,
    on_duplicate: _encoding.OnDuplicate = "raise",
    namespace: str | None = None,
    max_payload_bytes: int = _checks.DEFAULT_MAX_PAYLOAD,
    **options: Any,
) -> int | Awaitable[int | None] | None:
    """Enqueue a job on a connection you own, inside the transaction open on it.

    The job exists only if your transaction commits: it rolls back with it, and with
    a savepoint rolled back after the call. Returns its id (await it on the async
    kinds). Takes what `alkstore.append` takes: apsw.Connection, psycopg.Connection and
    AsyncConnection, SQLAlchemy's Session, Connection, AsyncSession and AsyncConnection,
    Django's connection (docs/adr/0024). With no transaction open this raises
    NotInTransaction; it never autocommits.

    Options as `Queue.enqueue` (delay / run_at, priority, max_attempts, backoff, expires,
    dedupe_key, headers), checked before anything is sent. A live job with the same
    dedupe key raises DuplicateJob without aborting your transaction (None with
    on_duplicate="ignore"). Workers are woken by the commit as for `q.enqueue` (the
    re-poll on PostgreSQL when no store in this process watches the connection).
    """
    namespace = _config.namespace_or_default(namespace)
    settings = _Settings(_checks.payload_limit(max_payload_bytes))
    params = _encoding.enqueue_params(settings, queue, payload, **options)
    name = _encoding.enqueue_query(params)
    if on_duplicate not in ("raise", "ignore"):
        raise _errors.InvalidArgument(
            f'on_duplicate must be "raise" or "ignore", got {on_duplicate!r}'
        )
    target = _owned.driver(conn)
    if isinstance(target, psycopg.Connection):
        rows = postgres.enqueue_on(target, namespace, name, params)
    elif isinstance(target, apsw.Connection):
        rows = sqlite.enqueue_on(target, namespace, name, params)
    else:
        return _enqueue_async(target, namespace, name, params, on_duplicate)
    return _encoding.check_duplicate(rows, params, on_duplicate)


async def _enqueue_async(
    pending: _owned.Async,
    namespace: str,
    name: str,
    params: dict[str, Any],
    on_duplicate: _encoding.OnDuplicate,
) -> int | None:
    conn = await pending
    rows = await postgres.enqueue_on_async(conn, namespace, name, params)
    return _encoding.check_duplicate(rows, params, on_duplicate)
