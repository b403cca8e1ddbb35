"""Per-key ordered delivery (docs/adr/0021): the head-of-line policies and the
operator's release of a parked key, written once above the engines.

In a queue configured `ordered=True`, each job with a key (the event key of a relayed
job, the `group=` of a direct enqueue) waits behind the older live jobs of that key:
the database holds it (migration 0008's triggers), so the claim is the plain one and
never reads a held job. What the key does when its head fails is the queue's
`on_head_failure`:

- "block" (the default): the head retries in its place, with its backoff, while the
  key waits; when its attempts run out it goes to the dead letters and the key goes on.
- "dead_letter": a head that fails goes to the dead letters at once (no retry), and the
  key goes on with its next job.
- "park": the head retries in its place as under "block"; when it fails for good it is
  parked instead of dead-lettered: it stays the key's head and the key stops until an
  operator releases it (`Queue.unpark(key)`, or `unpark(key, drop=True)` to dead-letter
  the head and go on).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Literal, get_args

import msgspec

from alkstore import _checks, _errors

if TYPE_CHECKING:
    from alkstore._engine import Engine
    from alkstore._jobs import Job
    from alkstore._queue import Queue
    from alkstore._queue_config import QueueConfig

HeadPolicy = Literal["block", "dead_letter", "park"]
POLICIES: tuple[str, ...] = get_args(HeadPolicy)
MAX_GROUP_BYTES = 1_000  # a group key is an index key: keep it an identifier's size
_encode = msgspec.json.Encoder().encode
KEY_SCAN = 1_000  # claimable jobs a claim with a key limit looks at, at most (ADR 0021)


def limit(name: str, value: object, current: int | None) -> int | None:
    """A limit given to `configure`: None keeps the current one, 0 removes it."""
    if value is None:
        return current
    return _checks.whole(name, value, 0) or None


def limit_params(params: dict[str, Any], config: QueueConfig, n: int) -> None:
    """The limits of a claim_limited run. With a key limit the claim looks further than
    n jobs: those of keys at their limit are passed over."""
    params["limit"] = config.concurrency
    params["key_limit"] = config.key_concurrency
    params["rate"] = config.rate_limit
    params["period"] = round(config.rate_period * 1000)
    params["key_rate"] = config.key_rate_limit
    keyed = config.key_concurrency or config.key_rate_limit
    params["scan"] = max(n, min(KEY_SCAN, 8 * n)) if keyed else n


class KeyCounted:
    """A claim_limited run with a key rate: the claim and the count of each claimed key's
    start in its rate window, in one transaction (on PostgreSQL the claim's lock is held
    to its end)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __call__(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        engine = self._engine
        with engine.transaction() as conn:
            rows = engine.run_in(conn, name, params)
            starts = Counter(row[11] for row in rows if row[11] is not None)  # by key
            if starts:
                counted = {
                    **params,
                    "starts": _encode([list(kv) for kv in starts.items()]).decode(),
                }
                engine.run_in(conn, "count_key_starts", counted)
        return rows


def limited_query(config: QueueConfig) -> str:
    """The claim of a limited queue: without a key limit, the leaner one (SQLite)."""
    return "claim_limited" if config.key_concurrency or config.key_rate_limit else "claim_capped"


def check_policy(policy: object) -> HeadPolicy:
    if policy not in POLICIES:
        raise _errors.InvalidArgument(
            f"on_head_failure must be one of {', '.join(POLICIES)}, not {policy!r}"
        )
    return policy  # type: ignore[return-value]


def check_group(group: object) -> str:
    """A `group=` key: a non-empty string of at most MAX_GROUP_BYTES bytes in UTF-8."""
    if not isinstance(group, str) or not group:
        raise _errors.InvalidArgument(f"group must be a non-empty string, not {group!r}")
    if len(group.encode()) > MAX_GROUP_BYTES:
        raise _errors.InvalidArgument(f"group must be at most {MAX_GROUP_BYTES} bytes")
    _checks.no_nul("group", group)
    return group


def policy_of(queue: Queue, job: Job[Any]) -> HeadPolicy | None:
    """The head-of-line policy that applies to `job`: None when it is not ordered (no
    key, or a queue that is not ordered)."""
    if job.key is None:
        return None
    config = queue.config()
    return config.on_head_failure if config.ordered else None


def park(queue: Queue, job: Job[Any], error: str) -> None:
    """Park a head that failed for good: it stays its key's head, unclaimable."""
    queue._checked(job, "fail", "park", attempts=job.attempt, error=_checks.reason(error))


def unpark(queue: Queue, key: str, *, drop: bool = False, reason: str | None = None) -> int | None:
    """Release a parked key; returns its head's id (None: the key is not parked)."""
    params: dict[str, Any] = {"queue": queue.name, "grp": key, "now": queue._rt.now_param()}
    if drop:
        params["reason"] = _checks.reason(reason or "dropped from a parked key")
        rows = queue._engine.run("drop_parked", params)
    else:
        rows = queue._engine.run("unpark", params)
    if not rows:
        return None
    queue._engine.committed()  # the key's next job (or its head again) is due now
    return int(rows[0][0])


def parked(queue: Queue) -> dict[str, int]:
    """The parked keys of the queue and the id of each one's head, in key order."""
    rows = queue._engine.run("parked_keys", {"queue": queue.name})
    return {key: int(job_id) for key, job_id in rows}
