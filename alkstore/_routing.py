"""Subscriptions, the relay's batch step and named leases: the storage half of the relay.

The relay process (`relay.Relay`) drives these; they are written once above the
engines as named SQL (each engine's sql/relay.sql). See docs/adr/0007-relay.md.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

import msgspec

from alkstore import _checks, _config, _errors, _fanout, _jobs, _queue

log = logging.getLogger("alkstore.retention")
_PATTERN = re.compile(r"[A-Za-z0-9_.:\-*]{1,200}")
_encode = msgspec.json.Encoder().encode
_patterns = msgspec.json.Decoder(list[str])


Gap = tuple[int, int]
"""Positions (first, last) a subscription asked for that retention had already pruned."""


class Subscription(msgspec.Struct, frozen=True):
    """A queue fed by the relay with every event whose type matches one of `events`."""

    queue: str
    events: list[str]
    checkpoint: int  # the last log position turned into jobs for this queue
    gap: Gap | None = None  # positions it asked for (subscribe, replay) already pruned
    # how its jobs take their event's key (docs/adr/0022): as `subscribe` was given it
    dedupe_by_key: bool = False
    replace_by_key: bool = False
    debounce_by_key: float | None = None  # seconds


class Replay(msgspec.Struct, frozen=True):
    """What `store.replay` did to a subscription's checkpoint."""

    queue: str
    previous: int  # the checkpoint before
    checkpoint: int  # the checkpoint now: from_position - 1
    redelivered: int  # events in (checkpoint, previous] still in the log: delivered again
    skipped: int  # events in (previous, checkpoint] not relayed yet: never delivered
    gap: Gap | None = None  # positions asked for again that retention had pruned


class NotLeader(_errors.AlkstoreError):
    """This process no longer holds the lease it needs; another took over."""


def like_pattern(glob: str) -> str:
    """`order.*` -> `order.%` for LIKE ... ESCAPE '\\' (so `_` and `%` match literally)."""
    if not isinstance(glob, str) or not _PATTERN.fullmatch(glob):
        raise _errors.InvalidArgument(
            f"invalid event pattern {glob!r}: use letters, digits, _ . : - and * as a wildcard"
        )
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%")


def subscribe(
    rt: _queue.Runtime,
    queue: str,
    events: Iterable[str],
    start: Literal["now", "beginning"] | int = "now",
    dedupe_by_key: bool = False,
    replace_by_key: bool = False,
    debounce_by_key: float | None = None,
    **queue_options: Any,
) -> Subscription:
    """Create or update a subscription. An existing one keeps its checkpoint."""
    replace_ms = _fanout.replace_ms(dedupe_by_key, replace_by_key, debounce_by_key)
    _config.check_name("queue", queue)
    globs = [events] if isinstance(events, str) else list(events)
    if not globs:
        raise _errors.InvalidArgument("a subscription needs at least one event pattern")
    patterns = [like_pattern(glob) for glob in globs]
    gap = None
    if start == "now":
        checkpoint = rt.engine.head()
    elif start == "beginning" or (
        isinstance(start, int) and not isinstance(start, bool) and start >= 1
    ):
        checkpoint = 0 if start == "beginning" else int(start) - 1  # as replay does
        head = rt.engine.head()
        if checkpoint > head:  # the head only grows: checked before the insert is enough
            raise _errors.InvalidArgument(past_head("subscribe", queue, int(start), head))
        gap = pruned(rt, checkpoint + 1, head)
    else:
        raise _errors.InvalidArgument(
            f'start must be "now", "beginning" or a position >= 1, not {start!r}'
        )
    if queue_options:
        _queue.Queue(rt, queue).configure(**queue_options)
    params = {
        "queue": queue,
        "events": _encode(globs).decode(),
        "patterns": _encode(patterns).decode(),
        "checkpoint": checkpoint,
        "now": rt.now_param(),
        "gap_first": None if gap is None else gap[0],
        "gap_last": None if gap is None else gap[1],
        "dedupe": dedupe_by_key,
        "replace_ms": replace_ms,  # replace / debounce by key (_fanout.py)
    }
    rows = rt.engine.run("subscribe", params)
    if not rows:  # the name is a sink subscription's (docs/adr/0026)
        raise _errors.InvalidArgument(f"{queue!r} is a sink subscription, not a queue's")
    rt.engine.committed()  # wake the relay: a new subscription may have work
    stored = _gap(rows[0][1], rows[0][2])
    if stored is not None and stored == gap:  # recorded now: a new subscription
        log.warning(
            "subscription %r starts at position %d, but positions %s were pruned by "
            "retention: they are not delivered (recorded; `alkstore status` shows it)",
            queue,
            checkpoint + 1,
            span(stored),
        )
    return Subscription(queue, globs, int(rows[0][0]), stored, *_keyed(dedupe_by_key, replace_ms))


def pruned(rt: _queue.Runtime, first: int, last: int, conn: Any = None) -> Gap | None:
    """The positions of first..last (a range below the head) that retention pruned: those
    before the oldest one left. (A position is never handed out twice: the log's
    positions are 1..head, so every one below the oldest left was pruned.)"""
    if last < first:
        return None
    engine = rt.engine
    rows = engine.run_in(conn, "oldest_position", {}) if conn else engine.run("oldest_position", {})
    oldest = rows[0][0] if rows else None
    if oldest is None:
        return first, last
    if int(oldest) > first:
        return first, min(last, int(oldest) - 1)
    return None


def span(gap: Gap) -> str:
    first, last = gap
    return str(first) if first == last else f"{first}-{last}"


def _gap(first: int | None, last: int | None) -> Gap | None:
    return None if first is None or last is None else (int(first), int(last))


def unsubscribe(rt: _queue.Runtime, queue: str) -> bool:
    """Stop routing events to `queue` (its jobs stay). False if there was no subscription."""
    return bool(rt.engine.run("unsubscribe", {"queue": _config.check_name("queue", queue)}))


def subscriptions(rt: _queue.Runtime) -> list[Subscription]:
    """The queue subscriptions (sinks: `_sinks.sink_subscriptions`)."""
    found = []
    for row in rt.engine.run("subscriptions", {}):
        queue, events, checkpoint, _, first, last, sink, *_, dedupe, replace_ms = row
        if sink is None:
            keyed = _keyed(bool(dedupe), replace_ms)
            gap = _gap(first, last)
            found.append(
                Subscription(queue, _patterns.decode(events), int(checkpoint), gap, *keyed)
            )
    return found


def _keyed(dedupe: bool, replace_ms: int | None) -> tuple[bool, bool, float | None]:
    """(dedupe_by_key, replace_by_key, debounce_by_key) from the stored columns."""
    if replace_ms is None:
        return dedupe, False, None
    return False, not replace_ms, replace_ms / 1000 if replace_ms else None


def past_head(action: str, queue: str, position: int, head: int) -> str:
    return (
        f"cannot {action} {queue!r} from position {position}: the log head is {head} "
        f"(at most {head + 1}, the next event); a checkpoint past the head would skip "
        "the events appended until the log got there"
    )


def replay(rt: _queue.Runtime, queue: str, from_position: int) -> Replay:
    """Deliver `queue`'s events from `from_position` on again: the checkpoint becomes
    `from_position - 1`, never past the log head (InvalidArgument).

    Handlers see those events again: delivery is at-least-once across a replay. Events
    retention pruned cannot be: they are not counted, and their positions are the
    returned (and recorded) `gap` (docs/adr/0020); a position after the checkpoint
    moves it forward and skips the events in between (counted in `skipped`)."""
    if isinstance(from_position, bool) or not isinstance(from_position, int) or from_position < 1:
        raise _errors.InvalidArgument(f"from_position must be >= 1, got {from_position!r}")
    engine, new = rt.engine, from_position - 1
    engine.sequence()  # the head counts every committed event (PostgreSQL, ADR 0004)
    with engine.transaction() as conn:
        rows = engine.run_in(conn, "replay_start", {"queue": _config.check_name("queue", queue)})
        if not rows:
            raise _errors.InvalidArgument(f"no subscription for queue {queue!r}")
        previous, head = int(rows[0][0]), int(rows[0][1])
        if new > head:
            raise _errors.InvalidArgument(past_head("replay", queue, from_position, head))
        low, high = sorted((new, previous))
        moved = int(engine.run_in(conn, "count_events", {"low": low, "high": high})[0][0])
        gap = pruned(rt, new + 1, previous, conn)  # what it asks for again that is gone
        params = {"queue": queue, "checkpoint": new, "now": rt.now_param()}
        params.update(gap_first=gap and gap[0], gap_last=gap and gap[1])
        engine.run_in(conn, "set_checkpoint", params)
    engine.committed()
    back = new <= previous
    return Replay(queue, previous, new, moved if back else 0, 0 if back else moved, gap)


class Lease:
    """A named, expiring lease with a fencing token, stored in the namespace's locks table.

    `acquire()` succeeds when the lease is free or expired (or already ours), and
    always hands out a larger token than before; `renew()` fails once another
    holder has taken over. Work done under the lease checks the token in its own
    transaction (`relay_batch`), so a paused former holder cannot write.
    """

    def __init__(self, rt: _queue.Runtime, name: str, ttl: float) -> None:
        self._rt = rt
        self.name = name
        self.ttl_ms = _checks.lease_ms("ttl", ttl)  # never a 0 ms lease
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.token: int | None = None

    def _params(self, **more: Any) -> dict[str, Any]:
        return {"name": self.name, "holder": self.holder, "ttl_ms": self.ttl_ms, **more}

    def acquire(self) -> bool:
        rows = self._rt.engine.run("lock_acquire", self._params(now=self._rt.now_param()))
        self.token = int(rows[0][0]) if rows else None
        return self.token is not None

    def renew(self, conn: Any = None) -> bool:
        """Extend the lease; inside the caller's transaction when `conn` is given."""
        if self.token is None:
            return False
        params = self._params(now=self._rt.now_param(), token=self.token)
        engine = self._rt.engine
        rows = (
            engine.run_in(conn, "lock_renew", params) if conn else engine.run("lock_renew", params)
        )
        if not rows:
            self.token = None
        return self.token is not None

    def release(self) -> None:
        if self.token is not None:
            self._rt.engine.run("lock_release", self._params(token=self.token))
            self.token = None

    def holder_info(self) -> tuple[str, int, datetime] | None:
        rows = self._rt.engine.run("lock_holder", {"name": self.name})
        if not rows:
            return None
        holder, token, expires_at = rows[0]
        return holder, int(token), _jobs.from_ms(expires_at)


def relay_batch(rt: _queue.Runtime, lease: Lease | None, batch: int = 5_000) -> tuple[int, int]:
    """Turn the next batch of committed events into jobs, exactly once.

    In one transaction: check the fencing token (raise NotLeader if lost), take
    the events after the lowest checkpoint (up to `batch`), insert one job per
    matching subscription, advance the checkpoints of the subscriptions the batch
    covered. Returns (jobs created, positions covered). A crash at any point rolls
    the whole batch back. Each step seeks the range (low, high] of the log, so a
    batch costs the same on a log of any length (docs/adr/0011).
    """
    _checks.whole("batch", batch, 1)
    engine = rt.engine
    engine.sequence()
    now = rt.now_param()
    with engine.transaction() as conn:
        if lease is not None and not lease.renew(conn):
            raise NotLeader(f"lease {lease.name!r} was taken over; stopping")
        low, high, queues, replacing = engine.run_in(conn, "relay_bounds", {"batch": batch})[0]
        if low is None or high <= low:
            return 0, 0
        # low..high: every statement seeks the batch's range (docs/adr/0011)
        params = {"low": low, "high": high, "now": now, "queues": queues}
        engine.run_in(conn, "relay_lock_keys", params)  # ordered keys, in one order
        plain, replacing = _fanout.split(queues, replacing)
        jobs = 0
        if plain != "[]":
            jobs = int(engine.run_in(conn, "relay_insert", {**params, "queues": plain})[0][0])
        if replacing != "[]":  # replace / debounce by key: their own statements
            jobs += _fanout.relay_replace(engine, conn, {**params, "queues": replacing})
        engine.run_in(conn, "relay_advance", params)
    if jobs:
        engine.committed()  # wake the workers
    return jobs, int(high - low)


def prune_log(rt: _queue.Runtime, older_than: float, batch: int = 10_000) -> int:
    """Delete events every subscription has passed that are older than `older_than` s."""
    before = rt.now_ms() - int(_checks.seconds("older_than", older_than) * 1000)
    total = 0
    while True:
        n = len(rt.engine.run("prune_log", {"before": before, "batch": batch}))
        total += n
        if n < batch:
            return total
