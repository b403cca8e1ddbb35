"""One job's parameters for the `enqueue` queries, checked before anything touches the
database: `Queue.enqueue`, `tx.enqueue` and `alkstore.enqueue` on an application's own
connection share them (docs/adr/0006, 0012)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from alkstore import _bulk, _checks, _config, _errors, _tracing


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
    runtime: Encoding, queue: str, payload: object, **options: Any
) -> dict[str, Any]:
    """Validate and encode one job; raises before anything touches the database. The
    options (`delay`, `run_at`, `priority`, `max_attempts`, `backoff`, `expires`,
    `dedupe_key`, `headers`, `group`) are checked as the bulk path checks them
    (`_bulk.options`); `group` is the job's key, which orders it behind the older jobs of
    that key when the queue is ordered (docs/adr/0021)."""
    _config.check_name("queue", queue)
    priority, run_at_ms, delay_ms, expires_at, expires_ms, attempts, curve, key, stored, grp = (
        _bulk.options(**options)
    )
    params = plain_params(runtime, queue, payload)
    params.update(
        priority=priority,
        run_at=run_at_ms,
        delay_ms=delay_ms,
        expires_at=expires_at,
        expires_ms=expires_ms,
        max_attempts=attempts,
        backoff=curve,
        dedupe_key=key,
        key=grp,
        headers=stored,
    )
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
