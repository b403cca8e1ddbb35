"""Argument checks and payload encoding shared by single and bulk enqueue.

Every check raises a typed error (alkstore/_errors.py) before anything touches the
database."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from alkstore import _errors, _events

INT32 = 2**31 - 1
DEFAULT_MAX_PAYLOAD = 1_048_576
"""Bytes of encoded JSON a payload may have, events and jobs alike (docs/adr/0003)."""
DEFAULT_VISIBILITY = 30.0  # seconds: a queue's lease length until it configures one


def seconds(name: str, value: object, *, positive: bool = False) -> float:
    """Check a duration in seconds: a finite number, >= 0 (or > 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _errors.InvalidArgument(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise _errors.InvalidArgument(
            f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}"
        )
    return float(value)


def lease_ms(name: str, value: object) -> int:
    """A lease length in seconds -> whole milliseconds. Below 0.001 s is refused, never
    rounded: a 0 ms lease is no lease, and 1 ms is not what was asked (ADR 0006)."""
    length = seconds(name, value, positive=True)
    if length < 0.001:
        raise _errors.InvalidArgument(f"{name} must be at least 0.001 seconds, got {value!r}")
    return round(length * 1000)


def whole(name: str, value: object, low: int, high: int = INT32) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _errors.InvalidArgument(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


def instant_ms(name: str, value: datetime | float) -> int:
    """An aware datetime, or epoch seconds, as epoch ms."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise _errors.InvalidArgument(f"{name} must be timezone-aware, got {value!r}")
        return int(value.timestamp() * 1000)
    return int(seconds(name, value) * 1000)


def dedupe_key(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise _errors.InvalidArgument(f"dedupe_key must be a non-empty str, got {value!r}")
    return no_nul("dedupe_key", value)


def no_nul(name: str, value: str | None) -> str | None:
    """A key without NUL: PostgreSQL's text cannot hold it (libpq cut it short there)."""
    if value is not None and "\x00" in value:
        raise _errors.InvalidArgument(
            f"{name} must not hold a NUL character (PostgreSQL cannot store it), got {value!r}"
        )
    return value


def payload_limit(value: object) -> int:
    """A `max_payload_bytes` setting: a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _errors.InvalidArgument(f"max_payload_bytes must be a positive int, got {value!r}")
    return value


def reason(text: object) -> str:
    """A failure reason or error as stored: NUL shown as `\\x00` (PostgreSQL's text cannot
    hold NUL; a reason is for people to read, so it is kept visibly, not refused)."""
    text = str(text)
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def size(text: str) -> int:
    """The UTF-8 length of a JSON text (its length when ASCII: no copy)."""
    return len(text) if text.isascii() else len(text.encode())


def encode_payload(payload: object, limit: int) -> tuple[str | None, str]:
    """(event type or None, JSON text) for a job payload; typed errors, nothing written."""
    if isinstance(payload, _events.Event):
        type_name, text = _events.codec.encode(payload)
    else:
        type_name, text = None, _events.codec.encode_value(payload)
    if len(text) > limit // 4 and size(text) > limit:  # UTF-8: at most 4 bytes a character
        raise _errors.PayloadTooLarge(size(text), limit, type_name)
    return type_name, text


def encode_payloads(payloads: Sequence[object], limit: int) -> tuple[list[str | None], list[str]]:
    """`encode_payload` of many at once: (event types, JSON texts), encoded in one call."""
    try:
        blob = _events.codec.encode_lines(payloads)
    except _errors.EventError:
        for payload in payloads:  # the first one that fails, with its own error
            encode_payload(payload, limit)
        raise
    texts = blob.decode().split("\n")
    texts.pop()  # every line ends with a newline; JSON text never holds one
    if len(blob) - len(texts) > limit:  # then one of them may be too large
        lengths = map(len, texts if blob.isascii() else blob.split(b"\n"))
        if max(lengths) > limit:
            for payload in payloads:
                encode_payload(payload, limit)  # PayloadTooLarge for the first that is
    event = _events.Event
    if not any(issubclass(kind, event) for kind in set(map(type, payloads))):
        return [None] * len(texts), texts
    name_of = _events.codec.name_of
    return [name_of(type(p)) if isinstance(p, event) else None for p in payloads], texts
