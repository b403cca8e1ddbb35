"""A queue's stored defaults and limits (`Queue.config`, `Queue.configure`): one row per
queue in the queues table, read by every process (docs/adr/0006, 0021)."""

from __future__ import annotations

from typing import Any

import msgspec

from alkstore import _backoff, _checks, _ordering, _sql

DEFAULT_MAX_ATTEMPTS = _sql.DEFAULT_MAX_ATTEMPTS  # one value, the SQL's too
DEFAULT_VISIBILITY = _checks.DEFAULT_VISIBILITY


class QueueConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Per-queue defaults, stored in the database so every process uses the same."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: _backoff.Backoff = _backoff.DEFAULT_BACKOFF
    visibility: float = DEFAULT_VISIBILITY
    dead_retention: float | None = None
    ordered: bool = False  # per-key ordered delivery (docs/adr/0021)
    on_head_failure: _ordering.HeadPolicy = "block"
    concurrency: int | None = None  # cluster-wide limits (docs/adr/0021); None: none
    key_concurrency: int | None = None
    rate_limit: int | None = None  # starts per rate_period seconds
    rate_period: float = 1.0
    key_rate_limit: int | None = None  # starts per rate_period per job key

    @property
    def limited(self) -> bool:
        return bool(
            self.concurrency or self.key_concurrency or self.rate_limit or self.key_rate_limit
        )


def from_row(row: tuple[Any, ...]) -> QueueConfig:
    """The `queue_config` query's row as a QueueConfig."""
    attempts, backoff, visibility_ms, retention_ms, ordered, policy = row[:6]
    limit, key_limit, rate, period_ms, key_rate = row[6:]
    return QueueConfig(
        max_attempts=attempts,
        backoff=_backoff.decode(backoff),
        visibility=visibility_ms / 1000,
        dead_retention=None if retention_ms is None else retention_ms / 1000,
        ordered=bool(ordered),
        on_head_failure=policy,
        concurrency=limit,
        key_concurrency=key_limit,
        rate_limit=rate,
        rate_period=1.0 if period_ms is None else period_ms / 1000,
        key_rate_limit=key_rate,
    )


def changed(
    current: QueueConfig,
    *,
    max_attempts: int | None,
    backoff: _backoff.Backoff | None,
    visibility: float | None,
    dead_retention: float | None,
    ordered: bool | None,
    on_head_failure: _ordering.HeadPolicy | None,
    concurrency: int | None,
    key_concurrency: int | None,
    rate_limit: int | None,
    rate_period: float | None,
    key_rate_limit: int | None,
) -> QueueConfig:
    """`current` with the values given (checked; None keeps a value, a limit of 0 removes
    it): what `Queue.configure` stores."""
    return QueueConfig(
        max_attempts=current.max_attempts
        if max_attempts is None
        else _checks.whole("max_attempts", max_attempts, 1),
        backoff=current.backoff if backoff is None else backoff,
        visibility=current.visibility
        if visibility is None
        else _checks.lease_ms("visibility", visibility) / 1000,
        dead_retention=current.dead_retention
        if dead_retention is None
        else _checks.seconds("dead_retention", dead_retention, positive=True),
        ordered=current.ordered if ordered is None else bool(ordered),
        on_head_failure=current.on_head_failure
        if on_head_failure is None
        else _ordering.check_policy(on_head_failure),
        concurrency=_ordering.limit("concurrency", concurrency, current.concurrency),
        key_concurrency=_ordering.limit(
            "key_concurrency", key_concurrency, current.key_concurrency
        ),
        rate_limit=_ordering.limit("rate_limit", rate_limit, current.rate_limit),
        rate_period=current.rate_period
        if rate_period is None
        else _checks.lease_ms("rate_period", rate_period) / 1000,
        key_rate_limit=_ordering.limit("key_rate_limit", key_rate_limit, current.key_rate_limit),
    )


def stored(queue: str, config: QueueConfig) -> dict[str, Any]:
    """The `queue_configure` query's parameters."""
    return {
        "queue": queue,
        "max_attempts": config.max_attempts,
        "backoff": _backoff.encode(config.backoff),
        "visibility_ms": round(config.visibility * 1000),
        "dead_retention_ms": None
        if config.dead_retention is None
        else int(config.dead_retention * 1000),
        "ordered": config.ordered,
        "head_policy": config.on_head_failure,
        "limit": config.concurrency,
        "key_limit": config.key_concurrency,
        "rate": config.rate_limit,
        "period": round(config.rate_period * 1000),
        "key_rate": config.key_rate_limit,
    }
