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
