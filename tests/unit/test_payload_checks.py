"""The codec's payload check against its definition (docs/adr/0003, addendum 2026-12-01):
a payload is accepted exactly when decoding its JSON gives back an equal value and no
string in it holds NUL. The cheap proof for simple events (`_payloads.event_check`) must
never accept more than that definition, and the codec must refuse exactly the rest."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alkstore
from alkstore import _events, _payloads


class Simple(alkstore.Event, tag="test.checks_simple"):
    n: int
    s: str
    x: float
    b: bool = False
    o: str | None = None


class NoEq(alkstore.Event, tag="test.checks_noeq", eq=False):
    items: list[float]


def has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, msgspec.Struct):
        return any(has_nul(getattr(value, f)) for f in value.__struct_fields__)
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return any(has_nul(item) for item in value)
    return False


def comes_back(value: object, kind: Any = Any) -> bool:
    """The definition, by brute force: decode what was encoded, compare, look for NUL."""
    try:
        back = msgspec.json.decode(msgspec.json.encode(value), type=kind)
    except msgspec.ValidationError:
        return False
    return bool(back == value) and not has_nul(value)


def accepted(encode: Any, value: object) -> bool:
    try:
        encode(value)
    except alkstore.InvalidPayload:
        return False
    return True


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()  # NaN and ±inf included
    | st.text(alphabet=st.sampled_from("ab\x00\\u0é"), max_size=6)
    | st.datetimes(timezones=st.just(UTC))
    | st.decimals(allow_nan=False, places=2)
)
keys = st.text(alphabet="ab\x00", max_size=3) | st.integers(-3, 3)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(keys, inner, max_size=3)
        | st.frozensets(st.integers(0, 3), max_size=2)
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_plain_payloads_are_accepted_exactly_when_they_come_back(value: object) -> None:
    expected = comes_back(value)
    assert accepted(_events.codec.encode_value, value) == expected, value
    assert accepted(lambda v: _events.codec.encode_lines([1, v]), value) == expected, value


field = st.integers() | st.floats() | st.text(alphabet="a\x00", max_size=2) | st.none()


@settings(max_examples=400, deadline=None)
@given(field, field, field, field | st.booleans(), field)
def test_events_are_accepted_exactly_when_they_come_back(
    n: object, s: object, x: object, b: object, o: object
) -> None:
    event = Simple(n=n, s=s, x=x, b=b, o=o)  # type: ignore[arg-type]
    expected = comes_back(event, Simple)
    proof = _payloads.event_check(Simple)
    assert proof is not None
    if proof(event):
        assert expected, event
    assert accepted(_events.codec.encode, event) == expected, event
    assert accepted(lambda e: _events.codec.encode_lines([e] * 40), event) == expected, event


def test_a_struct_without_eq_is_judged_by_its_fields() -> None:
    _events.codec.encode(NoEq(items=[1.5]))
    with pytest.raises(alkstore.InvalidPayload, match=r"NaN at `\$\.items\[0\]`"):
        _events.codec.encode(NoEq(items=[math.nan]))


class Constrained(alkstore.Event, tag="test.checks_constrained"):
    n: Annotated[int, msgspec.Meta(ge=0)]


def test_only_unconstrained_simple_fields_get_a_cheap_proof() -> None:
    assert _payloads.event_check(Simple) is not None
    assert _payloads.event_check(NoEq) is None  # a list: decoded and compared
    assert _payloads.event_check(Constrained) is None
    _events.codec.encode(Constrained(n=0))
    with pytest.raises(alkstore.InvalidPayload, match=r"Expected `int` >= 0 - at `\$\.n`"):
        _events.codec.encode(Constrained(n=-1))  # msgspec's constraints hold at append too


def test_refusals_name_the_type_and_the_path() -> None:
    changed = [
        ({"a": [1, datetime(2026, 1, 1, tzinfo=UTC)]}, r"datetime\.datetime at `\$\.a\[1\]`"),
        ({"d": Decimal("1.5")}, r"decimal\.Decimal at `\$\.d` would come back as str '1\.5'"),
        ({"k": {1: 2}}, r"dict key 1 \(int\) at `\$\.k`"),
    ]
    for value, message in changed:
        with pytest.raises(alkstore.InvalidPayload, match=message) as info:
            _events.codec.encode_value(value)
        assert str(info.value).endswith("for other types use an alkstore.Event with typed fields")
    with pytest.raises(alkstore.InvalidPayload) as lost:
        _events.codec.encode_value({"odd key": math.inf})
    assert str(lost.value) == (
        "invalid payload: inf at `$['odd key']`: JSON has no NaN or infinity (it would be "
        "stored as null)"
    )


def test_a_batch_of_several_kinds_is_checked_item_by_item() -> None:
    good = Simple(n=1, s="a", x=1.5)
    encode_lines = _events.codec.encode_lines
    assert encode_lines([good, NoEq(items=[2.5]), {"a": 1}]).count(b"\n") == 3
    assert encode_lines([good, Constrained(n=1)] * 20).count(b"\n") == 40
    bad: list[tuple[list[object], str]] = [
        ([good] * 20 + [Constrained(n=-1)], r"Expected `int` >= 0"),
        ([good, NoEq(items=[math.inf])], r"inf at `\$\.items\[0\]`"),
        ([good, Simple(n=1, s="a\x00", x=0.0)], r"NUL character at `\$\.s`"),
        ([good, {"a": {1, 2}}], r"set at `\$\.a`"),
    ]
    for values, message in bad:
        with pytest.raises(alkstore.InvalidPayload, match=message):
            encode_lines(values)
