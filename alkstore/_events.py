"""Typed events (msgspec Structs) and the one codec of the process.

An event's type name is its msgspec tag; it is stored in its own column beside
the JSON payload (see docs/adr/0003-event-encoding.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, dataclass_transform

import msgspec

from alkstore import _errors, _payloads


class _EventMeta(msgspec.StructMeta):
    """Makes every Event subclass keyword-only (msgspec's kw_only is per class)."""

    def __new__(
        mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> _EventMeta:
        kwargs.setdefault("kw_only", True)
        return super().__new__(mcls, name, bases, namespace, **kwargs)


# dataclass_transform tells type checkers what the metaclass does at run time.
@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(msgspec.field,))
class Event(msgspec.Struct, frozen=True, metaclass=_EventMeta):
    """Base class of every event: `class OrderPlaced(Event, tag="order.placed")`.

    Follow msgspec's schema-evolution rules: new fields get defaults, field types
    never change, tags never change.
    """

    _subclasses: ClassVar[list[type[Event]]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # msgspec sets the tag after __init_subclass__; resolve lazily in the codec.
        Event._subclasses.append(cls)


def type_name(event_cls: type[Event]) -> str:
    """The stored type name of an Event class (its msgspec tag)."""
    tag = event_cls.__struct_config__.tag
    if not isinstance(tag, str):
        raise _errors.EventError(
            f"{event_cls.__qualname__} has no string tag: declare it as "
            f'`class {event_cls.__name__}(alkstore.Event, tag="some.name")`'
        )
    return tag


_NUL = _payloads.NUL_ESCAPE
_NUL_TEXT = _NUL.decode()  # `in` on a str costs a third of `in` on bytes (Python 3.11)
_UNKNOWN: Any = object()


class Codec:
    """Encodes events and headers to JSON and decodes them back by type name.

    Every payload it encodes is checked to come back as it went in (docs/adr/0003,
    addendum 2026-12-01): proven by a few type tests where it can be (_payloads), else
    decoded again, with the event's own type or as plain JSON, and compared.
    InvalidPayload names what would not come back, before anything is written."""

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder()
        self._json = msgspec.json.Decoder()
        self._checkers: dict[type[Event], msgspec.json.Decoder[Any]] = {}
        self._proofs: dict[type[Event], Callable[[Any], bool] | None] = {}
        self._decoders: dict[str, msgspec.json.Decoder[Any]] = {}
        self._types: dict[str, type[Event]] = {}
        self._seen = 0
        self._clashes: dict[str, tuple[type[Event], type[Event]]] = {}
        self._lock = threading.Lock()
        self._headers = msgspec.json.Decoder(dict[str, str])
        self._names: dict[type[Event], str] = {}

    def encode(self, event: Event) -> tuple[str, str]:
        """Return (type name, JSON text) for an event instance that decodes back equal."""
        if not isinstance(event, Event):
            raise _errors.EventError(
                f"expected an alkstore.Event instance, got {type(event).__name__}"
            )
        cls = type(event)
        name = self._names.get(cls)
        if name is None:
            name = self._names[cls] = type_name(cls)
        try:
            raw = self._encoder.encode(event)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _errors.InvalidPayload(name, str(exc)) from exc
        proof = self._proofs.get(cls, _UNKNOWN)
        if proof is _UNKNOWN:
            proof = self._proof(cls)
        if proof is None or not proof(event):
            self._compare(event, raw)
        return name, raw.decode()

    def encode_value(self, value: object) -> str:
        """The JSON text of a plain payload (job payloads, progress) that decodes back equal."""
        try:
            raw = self._encoder.encode(value)
        except (TypeError, ValueError, OverflowError) as exc:
            detail = f"cannot encode {_payloads.type_label(value)}: {exc}"
            raise _errors.InvalidPayload(None, detail) from exc
        text = raw.decode()
        if self._json.decode(raw) != value or _NUL_TEXT in text:
            self._compare(value, raw)
        return text

    def encode_lines(self, values: Sequence[object]) -> bytes:
        """Values (events or plain) as newline-delimited JSON: each line is what `encode`
        or `encode_value` makes of it (the bulk enqueue, docs/adr/0013), and as checked."""
        try:
            blob = self._encoder.encode_lines(values)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _errors.EventError(f"cannot encode value: {exc}") from exc
        if not self._proven(values, blob):
            for value in values:  # the first that would not come back raises its own error
                if isinstance(value, Event):
                    self.encode(value)
                else:
                    self.encode_value(value)
        return blob

    def _proven(self, values: Sequence[object], blob: bytes) -> bool:
        """Whether every value comes back equal, checked for the whole batch at once:
        events by their classes' proofs, plain payloads or events of one class in one
        decode; anything else is left to the one-by-one check."""
        kinds = set(map(type, values))
        proofs: dict[type, Callable[[Any], bool] | None] = {}
        for kind in kinds:
            if issubclass(kind, Event):
                proof = self._proofs.get(kind, _UNKNOWN)
                proofs[kind] = self._proof(kind) if proof is _UNKNOWN else proof
        decoder = self._json
        if proofs:
            checks = [proof for proof in proofs.values() if proof is not None]
            if len(checks) == len(kinds) == 1:
                return all(map(checks[0], values))
            if len(checks) == len(kinds):
                return all(proofs[type(value)](value) for value in values)  # type: ignore[misc]
            if len(kinds) > 1:
                return False  # mixed kinds: one by one
            decoder = self._checker(next(iter(proofs)))
        if _NUL in blob:
            return False
        try:
            back = decoder.decode_lines(blob)
        except msgspec.DecodeError:
            return False
        return bool(back == (values if isinstance(values, list) else list(values)))

    def _proof(self, cls: type[Event]) -> Callable[[Any], bool] | None:
        """`cls`'s cheap proof (docs in _payloads), made once per class."""
        self._checker(cls)  # a class msgspec cannot decode is refused outright
        proof = self._proofs[cls] = _payloads.event_check(cls)
        return proof

    def _compare(self, value: object, raw: bytes) -> None:
        """Decode `raw` as `value`'s type (JSON for a plain payload) and compare: raise
        InvalidPayload naming what would not come back as it went in."""
        name, decoder = None, self._json
        if isinstance(value, Event):
            name, decoder = self.name_of(type(value)), self._checker(type(value))
        try:
            back = decoder.decode(raw)
        except msgspec.DecodeError as exc:  # a field that does not match its type
            raise _errors.InvalidPayload(name, _payloads.explain(value) or str(exc)) from exc
        if back == value and _NUL not in raw:
            return
        problem = _payloads.explain(value, back)
        if problem is None:
            return  # equal field by field (a Struct with eq=False), and no NUL
        if name is None and "would come back" in problem:
            problem = f"{problem}; {_payloads.PLAIN}"
        raise _errors.InvalidPayload(name, problem)

    def _checker(self, cls: type[Event]) -> msgspec.json.Decoder[Any]:
        """The decoder that checks `cls`'s payloads as they are encoded (cached)."""
        checker = self._checkers.get(cls)
        if checker is None:
            try:
                checker = msgspec.json.Decoder(cls)
            except Exception as exc:  # an annotation msgspec cannot resolve or decode
                raise _errors.EventError(
                    f"{cls.__qualname__} cannot be decoded, so it cannot be appended: {exc}"
                ) from exc
            self._checkers[cls] = checker
        return checker

    def name_of(self, cls: type[Event]) -> str:
        """The stored type name of an Event class (cached)."""
        name = self._names.get(cls)
        if name is None:
            name = self._names[cls] = type_name(cls)
        return name

    def encode_headers(self, headers: dict[str, str] | None) -> bytes | None:
        if not headers:
            return None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise _errors.EventError("headers must map str to str")
        raw = self._encoder.encode(headers)
        if _NUL in raw and any("\x00" in k + v for k, v in headers.items()):
            raise _errors.EventError("headers must not hold a NUL character (PostgreSQL cannot)")
        return raw

    def decode_headers(self, raw: bytes | str | None) -> dict[str, str]:
        """Stored headers: a JSON object of strings (InvalidHeaders if not)."""
        if not raw:
            return {}
        try:
            return self._headers.decode(raw)
        except msgspec.DecodeError as exc:
            raise _errors.InvalidHeaders(str(exc)) from exc

    def event_class(self, name: str) -> type[Event]:
        cls = self._types.get(name)
        if cls is None:
            self._refresh()
            cls = self._types.get(name)
            if cls is None:
                raise _errors.UnknownEventType(name)
        clash = self._clashes.get(name)
        if clash is not None:
            raise _errors.DuplicateEventType(name, *clash)
        return cls

    def decode(self, name: str, payload: bytes | str) -> Event:
        """Decode a stored payload into its Event class; errors carry msgspec's path."""
        decoder = self._decoders.get(name)
        if decoder is None:
            decoder = msgspec.json.Decoder(self.event_class(name))
            self._decoders[name] = decoder
        try:
            event: Event = decoder.decode(payload)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise _errors.InvalidPayload(name, str(exc)) from exc
        return event

    def _refresh(self) -> None:
        with self._lock:
            subclasses = Event._subclasses
            for cls in subclasses[self._seen :]:
                tag = cls.__struct_config__.tag
                if not isinstance(tag, str):
                    continue  # an untagged intermediate base class
                first = self._types.setdefault(tag, cls)
                if first is cls:
                    continue
                if (first.__module__, first.__qualname__) == (cls.__module__, cls.__qualname__):
                    self._types[tag] = cls  # the same class defined again (a reload)
                else:
                    self._clashes[tag] = (first, cls)
            self._seen = len(subclasses)


codec = Codec()
"""The process-wide codec."""
