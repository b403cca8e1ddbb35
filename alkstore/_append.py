"""`alkstore.append`: append into a transaction the application already holds."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, overload

import apsw
import psycopg

from alkstore import _checks, _config, _engine, _events, _owned, postgres, sqlite

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
    namespace: str = ...,
    max_payload_bytes: int = ...,
) -> Awaitable[None]: ...
@overload
def append_many(
    conn: _owned.SyncHolder,
    events: Iterable[_events.Event],
    *,
    key: str | None = ...,
    headers: dict[str, str] | None = ...,
    namespace: str = ...,
    max_payload_bytes: int = ...,
) -> None: ...
def append_many(
    conn: Any,
    events: Iterable[_events.Event],
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    namespace: str = _config.DEFAULT_NAMESPACE,
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
    """
    _config.check_name("namespace", namespace)
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
    namespace: str = ...,
    max_payload_bytes: int = ...,
) -> Awaitable[None]: ...
@overload
def append(
    conn: _owned.SyncHolder,
    event: _events.Event,
    *,
    key: str | None = ...,
    headers: dict[str, str] | None = ...,
    namespace: str = ...,
    max_payload_bytes: int = ...,
) -> None: ...
def append(
    conn: Any,
    event: _events.Event,
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    namespace: str = _config.DEFAULT_NAMESPACE,
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
