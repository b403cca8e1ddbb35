"""The event codec: typed encode/decode, clear errors with msgspec's path."""

from __future__ import annotations

import msgspec
import pytest

import alkstore
from alkstore import _events
from tests.events import Basket, OrderPlaced


def test_round_trip_by_type_name() -> None:
    name, payload = _events.codec.encode(OrderPlaced(order_id=1, total_cents=2))
    assert name == "test.order_placed"
    assert _events.codec.decode(name, payload) == OrderPlaced(order_id=1, total_cents=2)


def test_events_are_frozen_and_keyword_only() -> None:
    event = OrderPlaced(order_id=1)
    with pytest.raises(AttributeError):
        event.order_id = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        OrderPlaced(1)  # type: ignore[call-arg]


def test_invalid_payload_carries_the_path() -> None:
    with pytest.raises(alkstore.InvalidPayload, match=r"at `\$\.items\[1\]`") as info:
        _events.codec.decode("test.basket", b'{"items": [1, "two"]}')
    assert info.value.type_name == "test.basket"
    assert isinstance(info.value.__cause__, msgspec.ValidationError)


def test_malformed_json_is_invalid_payload() -> None:
    with pytest.raises(alkstore.InvalidPayload):
        _events.codec.decode("test.basket", b'{"items": [1,')


def test_unknown_type() -> None:
    with pytest.raises(alkstore.UnknownEventType, match=r"no\.such\.type") as info:
        _events.codec.decode("no.such.type", b"{}")
    assert info.value.type_name == "no.such.type"


def test_untagged_event_cannot_be_encoded() -> None:
    class Untagged(alkstore.Event):
        x: int

    with pytest.raises(alkstore.EventError, match="no string tag"):
        _events.codec.encode(Untagged(x=1))


def test_non_event_is_refused() -> None:
    with pytest.raises(alkstore.EventError, match=r"expected an alkstore\.Event"):
        _events.codec.encode({"order_id": 1})  # type: ignore[arg-type]


def test_unencodable_value_is_invalid_payload() -> None:
    class Weird(alkstore.Event, tag="test.weird"):
        value: object

    with pytest.raises(alkstore.InvalidPayload):
        _events.codec.encode(Weird(value=object()))


def test_two_classes_with_one_tag_are_refused_on_use() -> None:
    class First(alkstore.Event, tag="test.clash"):
        a: int

    class Second(alkstore.Event, tag="test.clash"):
        b: int

    with pytest.raises(alkstore.DuplicateEventType, match=r"test\.clash"):
        _events.codec.event_class("test.clash")
    # other types are unaffected by the clash
    assert _events.codec.event_class("test.basket") is Basket


def test_headers_must_be_strings() -> None:
    with pytest.raises(alkstore.EventError, match="headers"):
        _events.codec.encode_headers({"a": 1})  # type: ignore[dict-item]
    assert _events.codec.encode_headers({}) is None
    assert _events.codec.decode_headers(_events.codec.encode_headers({"a": "b"})) == {"a": "b"}
