"""`alkstore.enqueue`: enqueue a job in a transaction the application already holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

import apsw
import psycopg

from alkstore import _checks, _config, _errors, _owned, _queue, postgres, sqlite


@dataclass(frozen=True)
class _Settings:
    """What encoding a job needs (`_queue.Encoding`): the database's clock, and the limit."""

    max_payload_bytes: int
    clock: Callable[[], float] | None = None  # None: the database's clock


@overload
def enqueue(
    conn: _owned.AsyncHolder,
    queue: str,
    payload: object,
    *,
    on_duplicate: _queue.OnDuplicate = ...,
    namespace: str = ...,
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
    namespace: str = ...,
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
    namespace: str = ...,
    max_payload_bytes: int = ...,
    **options: Any,
) -> int | None: ...
def enqueue(
    conn: Any,
    queue: str,
    payload: object,
    *,
    on_duplicate: _queue.OnDuplicate = "raise",
    namespace: str = _config.DEFAULT_NAMESPACE,
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
    _config.check_name("namespace", namespace)
    settings = _Settings(_checks.payload_limit(max_payload_bytes))
    params = _queue.enqueue_params(settings, queue, payload, **options)
    name = _queue.enqueue_query(params)
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
    return _queue.check_duplicate(rows, params, on_duplicate)


async def _enqueue_async(
    pending: _owned.Async,
    namespace: str,
    name: str,
    params: dict[str, Any],
    on_duplicate: _queue.OnDuplicate,
) -> int | None:
    conn = await pending
    rows = await postgres.enqueue_on_async(conn, namespace, name, params)
    return _queue.check_duplicate(rows, params, on_duplicate)
