"""Backoff curves: tenacity's deterministic shapes, seeded full jitter, validation."""

from __future__ import annotations

import math
import random

import pytest

import alkstore
from alkstore import _backoff


def test_fixed() -> None:
    assert [alkstore.Fixed(delay=3).seconds(n) for n in (1, 2, 10)] == [3.0, 3.0, 3.0]


def test_linear_is_capped() -> None:
    curve = alkstore.Linear(initial=1, increment=2, max=6)
    assert [curve.seconds(n) for n in range(1, 6)] == [1.0, 3.0, 5.0, 6.0, 6.0]


def test_exponential_without_jitter_is_capped() -> None:
    curve = alkstore.Exponential(initial=0.5, factor=3, max=20, jitter=False)
    assert [curve.seconds(n) for n in range(1, 6)] == [0.5, 1.5, 4.5, 13.5, 20.0]


def test_jitter_is_full_jitter_and_seeded() -> None:
    curve = alkstore.Exponential(initial=1, factor=2, max=300, jitter=True)
    first = [curve.seconds(n, random.Random(7)) for n in range(1, 10)]
    again = [curve.seconds(n, random.Random(7)) for n in range(1, 10)]
    assert first == again
    assert all(0 <= s <= min(300, 2 ** (n - 1)) for n, s in zip(range(1, 10), first, strict=True))


def test_default_is_exponential_with_jitter() -> None:
    assert _backoff.DEFAULT_BACKOFF == alkstore.Exponential(
        initial=1, factor=2, max=300, jitter=True
    )


@pytest.mark.parametrize(
    "curve",
    [alkstore.Fixed(delay=1.5), alkstore.Linear(), alkstore.Exponential(jitter=False)],
)
def test_curves_round_trip_through_json(curve: alkstore.Backoff) -> None:
    assert _backoff.decode(_backoff.encode(curve)) == curve


@pytest.mark.parametrize(
    "make",
    [
        lambda: alkstore.Fixed(delay=-1),
        lambda: alkstore.Fixed(delay=math.nan),
        lambda: alkstore.Linear(increment=math.inf),
        lambda: alkstore.Exponential(initial=0),
        lambda: alkstore.Exponential(factor=0.5),
        lambda: alkstore.Exponential(max=-1),
    ],
)
def test_bad_curves_are_refused(make: object) -> None:
    with pytest.raises(alkstore.InvalidArgument):
        make()  # type: ignore[operator]


class Edge(random.Random):
    """A random source at one end of its range: uniform(a, b) returns a or (almost) b."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def random(self) -> float:
        return math.nextafter(1.0, 0.0) if self.high else 0.0


def test_default_jitter_keeps_at_least_half_the_delay() -> None:
    """Case 19 of issue 14: with full jitter 6 of 10 first retries came within 0.5 s."""
    curve = _backoff.DEFAULT_BACKOFF
    for n in range(1, 12):
        full = min(300.0, 2.0 ** (n - 1))
        assert curve.seconds(n, Edge(high=False)) == full / 2
        assert full / 2 < curve.seconds(n, Edge(high=True)) <= full
    rng = random.Random(14)
    firsts = [curve.seconds(1, rng) for _ in range(10_000)]
    assert 0.5 <= min(firsts) < 0.51 and 0.99 < max(firsts) <= 1.0


def test_equal_jitter_is_the_default_and_the_meaning_of_true() -> None:
    assert alkstore.Exponential() == alkstore.Exponential(jitter=True)
    assert alkstore.Exponential(jitter="equal") == alkstore.Exponential(jitter=True)
    decoded = _backoff.decode(_backoff.encode(alkstore.Exponential(jitter="equal")))
    assert isinstance(decoded, alkstore.Exponential) and decoded.jitter is True


def test_full_jitter_is_offered() -> None:
    curve = alkstore.Exponential(initial=1, factor=2, max=300, jitter="full")
    assert curve.seconds(3, Edge(high=False)) == 0.0
    assert 3.99 < curve.seconds(3, Edge(high=True)) <= 4.0
    assert _backoff.decode(_backoff.encode(curve)) == curve
    stored_before = b'{"kind":"exponential","initial":1.0,"factor":2.0,"max":300.0,"jitter":true}'
    assert _backoff.decode(stored_before) == alkstore.Exponential()  # now equal jitter


@pytest.mark.parametrize("jitter", ["half", "", 1, None, 0.5])
def test_unknown_jitter_is_refused(jitter: object) -> None:
    with pytest.raises(alkstore.InvalidArgument, match="jitter"):
        alkstore.Exponential(jitter=jitter)  # type: ignore[arg-type]
