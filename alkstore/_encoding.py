"""One job's parameters for the `enqueue` queries, checked before anything touches the
database: `Queue.enqueue`, `tx.enqueue` and `alkstore.enqueue` on an application's own
connection share them (docs/adr/0006, 0012)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from alkstore import _backoff, _bulk, _checks, _config, _errors, _events, _ordering, _tracing


class Encoding(Protocol):
    """What encoding a job needs: a Runtime, or `alkstore.enqueue`'s settings on a
    connection the application owns (alkstore/_append.py)."""

    @property
    def clock(self) -> Callable[[], float] | None: ...
    @property
    def max_payload_bytes(self) -> int: ...


def plain_params(runtime: Encoding, queue: str, payload: object) -> dict[str, Any]:
    """One job with every option at its default (the hot path: `queue` already checked).
    Times are relative to the statement's `now` (the database's, ADR 0012)."""
    clock = runtime.clock
    type_name, raw = _checks.encode_payload(payload, runtime.max_payload_bytes)
    return {
        "queue": queue,
        "priority": 0,
        "run_at": None,
        "delay_ms": 0,
        "now": None if clock is None else int(clock() * 1000),
        "expires_at": None,
        "expires_ms": None,
        "max_attempts": None,
        "backoff": None,
        "dedupe_key": None,
        "type": type_name,
        "key": None,
        "position": None,
        "headers": _tracing.encoded(),  # the current span's trace context (ADR 0019)
        "payload": raw,
    }


def enqueue_params(
    runtime: Encoding,
    queue: str,
    payload: object,
    *,
    delay: float | None = None,
    run_at: datetime | float | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    backoff: _backoff.Backoff | None = None,
    expires: datetime | float | None = None,
    dedupe_key: str | None = None,
    headers: dict[str, str] | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """Validate and encode one job; raises before anything touches the database.
    `group`: the job's key, which orders it behind the older jobs of that key when the
    queue is ordered (docs/adr/0021)."""
    _config.check_name("queue", queue)
    if delay is not None and run_at is not None:
        raise _errors.InvalidArgument("pass delay or run_at, not both")
    _checks.dedupe_key(dedupe_key)
    params = plain_params(runtime, queue, payload)
    if delay is not None:
        params["delay_ms"] = int(_checks.seconds("delay", delay) * 1000)
    elif run_at is not None:
        params["run_at"] = _checks.instant_ms("run_at", run_at)  # epoch seconds or a datetime
    params["priority"] = _checks.whole("priority", priority, -_checks.INT32)
    if isinstance(expires, datetime):
        params["expires_at"] = _checks.instant_ms("expires", expires)
    elif expires is not None:
        params["expires_ms"] = int(_checks.seconds("expires", expires) * 1000)
    if max_attempts is not None:
        params["max_attempts"] = _checks.whole("max_attempts", max_attempts, 1)
    if backoff is not None:
        params["backoff"] = _backoff.encode(backoff)
    params["dedupe_key"] = dedupe_key
    if group is not None:
        params["key"] = _ordering.check_group(group)
    encoded_headers = _events.codec.encode_headers(_tracing.merged(headers) if headers else None)
    if encoded_headers:
        params["headers"] = encoded_headers.decode()
    return params


OnDuplicate = _bulk.OnDuplicate


def enqueue_query(params: dict[str, Any]) -> str:
    """The named query for one job: the ON CONFLICT form only when there is a dedupe key."""
    return "enqueue" if params["dedupe_key"] is None else "enqueue_dedupe"


def check_duplicate(
    rows: list[tuple[Any, ...]], params: dict[str, Any], on_duplicate: OnDuplicate
) -> int | None:
    if rows:
        return int(rows[0][0])
    if on_duplicate == "ignore":
        return None
    raise _errors.DuplicateJob(params["queue"], params["dedupe_key"])
