"""The sink interface and the envelope every broker gets (docs/adr/0026).

A sink publishes one batch of messages, in order, and returns only once the broker
confirmed every one of them; otherwise it raises `SinkError` saying how many leading
messages were confirmed and whether the failure is permanent (the message is refused
for good: the subscription is parked) or not (retried with backoff). That is all a
broker has to provide, so a Kafka sink (aiokafka, an idempotent producer, the event
key as the record key) is one more module of this size.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

import msgspec

import alkstore

_PLACEHOLDER = re.compile(r"\{(type|key|namespace|name)\}")
NO_KEY = "_"  # what `{key}` becomes for an event appended without a key
RENDERED = 10_000  # destinations a Template keeps rendered
ENVELOPE = ("alk-id", "alk-namespace", "alk-type", "alk-key", "alk-position", "alk-appended-at")
"""The envelope headers, in this order (alk-key only when the event has a key)."""


class Message(msgspec.Struct, frozen=True):
    """One event as a broker message: `id` is stable across retries and relays
    (`<namespace>:<position>`), `headers` the envelope (see `envelope`) plus the event's
    own headers (trace context included), `body` the msgspec-encoded payload."""

    id: str
    position: int
    type: str
    key: str | None
    headers: dict[str, str]
    body: bytes


def envelope(namespace: str, event: alkstore.SinkEvent) -> Message:
    """The message for one event. Envelope headers (the event's own headers keep their
    names; ours win a clash): alk-id, alk-namespace, alk-type, alk-key (absent without
    a key), alk-position, alk-appended-at (RFC 3339, UTC, milliseconds)."""
    position = str(event.position)
    ident = f"{namespace}:{position}"
    at = appended_at(event.appended_at)
    if event.key is None:
        headers = {
            **event.headers,
            "alk-id": ident,
            "alk-namespace": namespace,
            "alk-type": event.type,
            "alk-position": position,
            "alk-appended-at": at,
        }
    else:
        headers = {
            **event.headers,
            "alk-id": ident,
            "alk-namespace": namespace,
            "alk-type": event.type,
            "alk-key": event.key,
            "alk-position": position,
            "alk-appended-at": at,
        }
    return Message(ident, event.position, event.type, event.key, headers, event.payload)


_last_at: tuple[datetime, str] = (datetime(1970, 1, 1, tzinfo=UTC), "1970-01-01T00:00:00.000Z")


def appended_at(at: datetime) -> str:
    """`at` as RFC 3339 in UTC with milliseconds (`2026-12-01T17:40:00.123Z`). Events of
    one transaction share their time (and the read shares the object): the last one is
    kept. The relay's thread calls it per event; isoformat() took a few µs each."""
    global _last_at
    last = _last_at
    if at is last[0]:
        return last[1]
    utc = at if at.tzinfo is UTC else at.astimezone(UTC)  # PostgreSQL's: the session's zone
    text = "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (  # noqa: UP031 (the fastest here)
        utc.year,
        utc.month,
        utc.day,
        utc.hour,
        utc.minute,
        utc.second,
        utc.microsecond // 1000,
    )
    _last_at = (at, text)  # the object as read: the next event of its transaction has it
    return text


class Template:
    """A destination (`orders.{type}`, `events:{key}`) rendered per message; `clean`
    makes one value fit the broker's syntax (NATS subject tokens, ...)."""

    def __init__(
        self, text: str, namespace: str, name: str, clean: Callable[[str], str] = str
    ) -> None:
        self.text = text
        self._fixed = {"namespace": clean(namespace), "name": clean(name)}
        self._clean = clean
        self.constant = "{type}" not in text and "{key}" not in text
        self._keyed = "{key}" in text
        self._value = self._render("", None) if self.constant else ""
        self._rendered: dict[object, str] = {}  # (type[, key]) -> destination

    def _render(self, type_: str, key: str | None) -> str:
        values = {**self._fixed, "type": self._clean(type_), "key": self._clean(key or NO_KEY)}
        return _PLACEHOLDER.sub(lambda m: values[m[1]], self.text)

    def __call__(self, message: Message) -> str:
        """Rendered once per event type (per type and key with `{key}`; up to RENDERED
        kept, then they are dropped and rendered again): a regex substitution per
        message was a tenth of NATS' per-message cost (docs/performance.md)."""
        if self.constant:
            return self._value
        which = (message.type, message.key) if self._keyed else message.type
        found = self._rendered.get(which)
        if found is None:
            if len(self._rendered) >= RENDERED:
                self._rendered.clear()
            found = self._rendered[which] = self._render(message.type, message.key)
        return found


class SinkError(Exception):
    """A batch was not wholly confirmed: its first `confirmed` messages were."""

    def __init__(self, reason: str, *, confirmed: int, permanent: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.confirmed = confirmed
        self.permanent = permanent


def unavailable(exc: BaseException, confirmed: int = 0) -> SinkError:
    """A failure worth retrying: the broker down, a timeout, a lost connection."""
    return SinkError(f"{type(exc).__name__}: {exc}", confirmed=confirmed, permanent=False)


def rejected(reason: str, confirmed: int) -> SinkError:
    """The broker refuses the message after `confirmed` for good: park."""
    return SinkError(reason, confirmed=confirmed, permanent=True)


def first_failure(outcomes: Sequence[BaseException | object]) -> int:
    """The index of the first failed outcome (len: none failed)."""
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, BaseException):
            return i
    return len(outcomes)


class Sink(abc.ABC):
    """One broker connection for one sink subscription. `options` are the subscription's
    (validated here: a bad one is a SinkError, permanent). Driven by one asyncio loop."""

    schemes: ClassVar[tuple[str, ...]]

    def __init__(self, url: str, options: dict[str, Any], namespace: str, name: str) -> None:
        self.url = url
        self.options = dict(options)
        self.namespace = namespace
        self.name = name

    def option(self, name: str, default: Any, kind: type | tuple[type, ...]) -> Any:
        value = self.options.pop(name, default)
        if value is not None and not isinstance(value, kind):
            raise rejected(f"sink option {name}={value!r} has the wrong type", 0)
        return value

    def no_more_options(self) -> None:
        if self.options:
            raise rejected(f"unknown sink options: {', '.join(sorted(self.options))}", 0)

    @abc.abstractmethod
    async def connect(self) -> None:
        """Connect (SinkError if the broker cannot be reached or refuses the settings)."""

    @abc.abstractmethod
    async def publish(self, messages: Sequence[Message], timeout: float) -> int:
        """Publish in order, pipelined, within `timeout` s; return once every one is
        confirmed, with how many of them the broker dropped as duplicates (0 if it does
        not tell). SinkError otherwise: how many leading messages were confirmed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Drop the connection (never raises)."""
