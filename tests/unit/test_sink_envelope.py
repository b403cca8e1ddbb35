"""The broker message built from one event (docs/adr/0026 "The envelope") and the
destination templates, without a broker: the fast paths (appended-at formatted by hand
and reused within a transaction, a template rendered once per type and key) give what
the plain definitions give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

import alkstore
from relay.sinks import _base
from relay.sinks._nats import _token


def _event(
    position: int, at: datetime, key: str | None = None, **headers: str
) -> alkstore.SinkEvent:
    return alkstore.SinkEvent(position, "order.placed", key, headers, b"{}", at)


def _iso(at: datetime) -> str:  # the definition: RFC 3339, UTC, milliseconds
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@given(
    st.datetimes(
        min_value=datetime(1, 1, 1, 12), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]),
)
def test_appended_at_is_rfc3339_utc_with_milliseconds(at: datetime, tz: timezone) -> None:
    local = at.astimezone(tz)
    assert _base.appended_at(local) == _iso(local)
    assert _base.appended_at(local) == _iso(local)  # kept by the object as read
    assert _base.appended_at(at) == _iso(at)
    assert _base.appended_at(at) == _iso(at)  # the one kept from the call before


def test_the_envelope_headers_in_order_ours_winning_a_clash() -> None:
    at = datetime(2026, 12, 1, 17, 40, 0, 123_999, tzinfo=UTC)
    m = _base.envelope("ns", _event(42, at, key="k1", traceparent="t", **{"alk-type": "forged"}))
    assert (m.id, m.position, m.type, m.key, m.body) == ("ns:42", 42, "order.placed", "k1", b"{}")
    assert list(m.headers.items()) == [
        ("traceparent", "t"),
        ("alk-type", "order.placed"),  # the event's own header of that name keeps its place
        ("alk-id", "ns:42"),
        ("alk-namespace", "ns"),
        ("alk-key", "k1"),
        ("alk-position", "42"),
        ("alk-appended-at", "2026-12-01T17:40:00.123Z"),
    ]
    keyless = _base.envelope("ns", _event(7, at))
    assert list(keyless.headers) == [h for h in _base.ENVELOPE if h != "alk-key"]
    assert keyless.key is None


@pytest.mark.parametrize(
    "text", ["orders.{type}", "orders.{type}.{key}", "{namespace}.{name}", "x.{key}"]
)
def test_a_template_renders_each_type_and_key_as_it_would_afresh(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_base, "RENDERED", 5)  # the kept renderings are dropped on the way
    template = _base.Template(text, "ns", "feed", clean=_token)
    at = datetime(2026, 12, 1, tzinfo=UTC)
    for round_ in range(3):
        for i in range(12):
            event = alkstore.SinkEvent(
                i, f"t{i % 4}", None if i % 3 == 0 else f"k {i}", {}, b"", at
            )
            m = _base.envelope("ns", event)
            fresh = _base.Template(text, "ns", "feed", clean=_token)._render(m.type, m.key)
            assert template(m) == fresh, (round_, i)
    assert (
        template(_base.envelope("ns", _event(1, at, key="a*b")))
        == {
            "orders.{type}": "orders.order.placed",
            "orders.{type}.{key}": "orders.order.placed.a_b",
            "{namespace}.{name}": "ns.feed",
            "x.{key}": "x.a_b",
        }[text]
    )
