"""Subscriptions that feed a message broker: the storage half (docs/adr/0026).

A sink subscription is a row of the subscriptions table with a `sink` URL: its name
shares the queues' names (one name, one subscription), its checkpoint is the last log
position the broker confirmed. The relay's sink loop (`relay.sinks`) reads a batch
here under its fenced lease, publishes it, and advances the checkpoint to the last
confirmed message; a message the broker refuses for good parks the subscription.
alkstore itself never talks to a broker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

import msgspec

from alkstore import _config, _errors, _events, _jobs, _queue, _routing

SCHEMES = ("nats", "redis", "rediss", "amqp", "amqps")
"""The brokers the relay can feed (relay/sinks); the URL's scheme picks one."""

_URL = re.compile(r"([a-z]+)://[^\s]+")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
FIELDS = ("type", "key", "namespace", "name")
"""What a destination template may name: `{type}`, `{key}`, `{namespace}`, `{name}`."""
_encode = msgspec.json.Encoder().encode
_patterns = msgspec.json.Decoder(list[str])
_options = msgspec.json.Decoder(dict[str, Any])


class SinkSubscription(msgspec.Struct, frozen=True):
    """A subscription that feeds a broker: every event whose type matches `events` is
    published to `sink` (a URL) with `options` (the destination template and the sink's
    settings). `checkpoint`: the last log position the broker confirmed. `parked`: why
    the relay stopped (a permanent rejection), None while it runs."""

    name: str
    sink: str
    events: list[str]
    options: dict[str, Any]
    checkpoint: int
    parked: str | None = None
    parked_at: datetime | None = None
    gap: _routing.Gap | None = None


class SinkEvent(msgspec.Struct, frozen=True):
    """One event to publish: its place in the log, its envelope, its encoded payload."""

    position: int
    type: str
    key: str | None
    headers: dict[str, str]
    payload: bytes
    appended_at: datetime


class SinkBatch(msgspec.Struct, frozen=True):
    """The events of (low, high] a sink subscribes to. Advancing to `high` after every
    one of them is confirmed also passes the events it does not subscribe to."""

    name: str
    low: int
    high: int
    events: list[SinkEvent]


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options are JSON scalars; string values may name FIELDS in braces."""
    for name, value in options.items():
        if value is None or isinstance(value, bool | int | float):
            continue
        if not isinstance(value, str):
            raise _errors.InvalidArgument(
                f"sink option {name}={value!r}: use a string, number or boolean"
            )
        for field in _PLACEHOLDER.findall(value):
            if field not in FIELDS:
                raise _errors.InvalidArgument(
                    f"sink option {name}={value!r}: {{{field}}} is not one of "
                    + ", ".join("{" + f + "}" for f in FIELDS)
                )
    return options


def check_url(url: object) -> str:
    match = _URL.fullmatch(url) if isinstance(url, str) else None
    if match is None or match[1] not in SCHEMES:
        raise _errors.InvalidArgument(
            f"invalid sink {url!r}: use a broker URL, {' '.join(s + '://…' for s in SCHEMES)}"
        )
    return str(url)


def subscribe_sink(
    rt: _queue.Runtime,
    name: str,
    sink: str,
    events: Iterable[str],
    start: Literal["now", "beginning"] | int = "now",
    **options: Any,
) -> SinkSubscription:
    """Create or update a sink subscription; an existing one keeps its checkpoint (and
    stays parked if it was). A queue subscription's name is refused."""
    _config.check_name("queue", name)
    check_url(sink)
    check_options(options)
    globs = [events] if isinstance(events, str) else list(events)
    if not globs:
        raise _errors.InvalidArgument("a subscription needs at least one event pattern")
    patterns = [_routing.like_pattern(glob) for glob in globs]
    gap = None
    head = rt.engine.head()
    if start == "now":
        checkpoint = head
    elif start == "beginning" or (
        isinstance(start, int) and not isinstance(start, bool) and start >= 1
    ):
        checkpoint = 0 if start == "beginning" else int(start) - 1
        if checkpoint > head:
            raise _errors.InvalidArgument(_routing.past_head("subscribe", name, int(start), head))
        gap = _routing.pruned(rt, checkpoint + 1, head)
    else:
        raise _errors.InvalidArgument(
            f'start must be "now", "beginning" or a position >= 1, not {start!r}'
        )
    params = {
        "queue": name,
        "events": _encode(globs).decode(),
        "patterns": _encode(patterns).decode(),
        "checkpoint": checkpoint,
        "now": rt.now_param(),
        "gap_first": None if gap is None else gap[0],
        "gap_last": None if gap is None else gap[1],
        "sink": sink,
        "options": _encode(options).decode(),
    }
    rows = rt.engine.run("subscribe_sink", params)
    if not rows:
        raise _errors.InvalidArgument(
            f"{name!r} is a queue subscription; a sink needs a name of its own"
        )
    rt.engine.committed()  # wake the relay
    for sub in sink_subscriptions(rt):
        if sub.name == name:
            return sub
    raise _errors.InvalidArgument(f"sink subscription {name!r} was removed meanwhile")


def sink_subscriptions(rt: _queue.Runtime) -> list[SinkSubscription]:
    found = []
    for row in rt.engine.run("subscriptions", {}):
        name, events, checkpoint, _, first, last, sink, options, parked, parked_at, *_ = row
        if sink is None:
            continue
        found.append(
            SinkSubscription(
                name,
                sink,
                _patterns.decode(events),
                _options.decode(options) if options else {},
                int(checkpoint),
                parked,
                None if parked_at is None else _jobs.from_ms(int(parked_at)),
                None if first is None or last is None else (int(first), int(last)),
            )
        )
    return found


def batch(
    rt: _queue.Runtime,
    lease: _routing.Lease | None,
    name: str,
    size: int,
    after: int | None = None,
) -> SinkBatch:
    """The next events of sink `name` after its checkpoint (or after position `after`:
    the relay reads a batch ahead while the last one publishes), at most `size`
    positions (fenced: NotLeader if `lease` was taken over). No events and low == high:
    nothing to do, or the subscription is gone or parked."""
    engine = rt.engine
    if after is None:  # a batch read ahead reads what the read before it numbered
        engine.sequence()
    decode_headers = _events.codec.decode_headers
    with engine.transaction() as conn:
        if lease is not None and not lease.renew(conn):
            raise _routing.NotLeader(f"lease {lease.name!r} was taken over; stopping")
        params = {"name": name, "batch": size, "after": after}
        rows = engine.run_in(conn, "sink_bounds", params)
        if not rows:
            return SinkBatch(name, 0, 0, [])
        low, high, patterns = int(rows[0][0]), int(rows[0][1]), rows[0][2]
        if high <= low:
            return SinkBatch(name, low, low, [])
        params = {"low": low, "high": high, "events": patterns}
        found = []
        raw: object = None  # events of one transaction share their time: one datetime
        when = _jobs.from_ms(0)
        for position, type_, key, headers, payload, at in engine.run_in(
            conn, "sink_events", params
        ):
            if at != raw:
                raw, when = at, _jobs.from_ms(at) if isinstance(at, int) else at
            found.append(
                SinkEvent(
                    int(position),
                    type_,
                    key,
                    decode_headers(headers),
                    payload.encode() if isinstance(payload, str) else bytes(payload),
                    when,
                )
            )
    return SinkBatch(name, low, high, found)


def advance(
    rt: _queue.Runtime, lease: _routing.Lease | None, name: str, low: int, high: int
) -> bool:
    """Move sink `name`'s checkpoint from `low` to `high` (fenced). False if it moved
    meanwhile (a replay, a resubscription) or is gone: the caller reads again."""
    engine = rt.engine
    with engine.transaction() as conn:
        if lease is not None and not lease.renew(conn):
            raise _routing.NotLeader(f"lease {lease.name!r} was taken over; stopping")
        params = {"name": name, "low": low, "high": high, "now": rt.now_param()}
        return bool(engine.run_in(conn, "sink_advance", params))


def park(rt: _queue.Runtime, lease: _routing.Lease | None, name: str, reason: str) -> bool:
    """Stop feeding sink `name` (its checkpoint stays: nothing is skipped) until
    `resume`. Fenced like `advance`."""
    engine = rt.engine
    with engine.transaction() as conn:
        if lease is not None and not lease.renew(conn):
            raise _routing.NotLeader(f"lease {lease.name!r} was taken over; stopping")
        params = {"name": name, "reason": reason[:1000], "now": rt.now_param()}
        return bool(engine.run_in(conn, "sink_park", params))


def resume(rt: _queue.Runtime, name: str) -> bool:
    """Feed a parked sink again, from its checkpoint. False if there is no such sink."""
    params = {"name": _config.check_name("queue", name), "now": rt.now_param()}
    done = bool(rt.engine.run("sink_resume", params))
    rt.engine.committed()
    return done


class Feed:
    """The relay's side of the sinks (`store.sink_feed()`): fenced batch reads, checkpoint
    moves and parking, each checking the relay's lease in its own transaction."""

    def __init__(self, rt: _queue.Runtime) -> None:
        self._rt = rt

    def subscriptions(self) -> list[SinkSubscription]:
        return sink_subscriptions(self._rt)

    def batch(
        self, lease: _routing.Lease | None, name: str, size: int, after: int | None = None
    ) -> SinkBatch:
        return batch(self._rt, lease, name, size, after)

    def advance(self, lease: _routing.Lease | None, name: str, low: int, high: int) -> bool:
        return advance(self._rt, lease, name, low, high)

    def park(self, lease: _routing.Lease | None, name: str, reason: str) -> bool:
        return park(self._rt, lease, name, reason)
