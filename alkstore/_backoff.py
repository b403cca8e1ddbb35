"""Backoff curves between attempts: Fixed, Linear, Exponential (with optional full jitter).

The deterministic part of each curve is a tenacity wait strategy; jitter draws
from a `random.Random` the caller passes, so schedules are reproducible under
a seed. Curves are msgspec Structs, stored as JSON with the queue or the job.
"""

from __future__ import annotations

import math
import random

import msgspec
import tenacity

from alkstore import _errors


def _check(name: str, value: float, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _errors.InvalidArgument(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise _errors.InvalidArgument(f"{name} must be {bound}, got {value!r}")


class _Curve(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    def _wait(self) -> tenacity.wait.wait_base:
        raise NotImplementedError

    @property
    def jittered(self) -> bool:
        return False

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
        state.attempt_number = max(1, attempt)
        base = float(self._wait()(state))
        if self.jittered:
            return (rng or random).uniform(0.0, base)
        return base


class Fixed(_Curve, frozen=True, tag="fixed"):
    """The same delay after every attempt."""

    delay: float = 5.0

    def __post_init__(self) -> None:
        _check("delay", self.delay)

    def _wait(self) -> tenacity.wait.wait_base:
        return tenacity.wait_fixed(self.delay)


class Linear(_Curve, frozen=True, tag="linear"):
    """initial, initial + increment, initial + 2*increment, ... capped at max."""

    initial: float = 1.0
    increment: float = 1.0
    max: float = 300.0

    def __post_init__(self) -> None:
        _check("initial", self.initial)
        _check("increment", self.increment)
        _check("max", self.max)

    def _wait(self) -> tenacity.wait.wait_base:
        return tenacity.wait_incrementing(
            start=self.initial, increment=self.increment, max=self.max
        )


class Exponential(_Curve, frozen=True, tag="exponential"):
    """initial * factor**(attempt-1), capped at max; with jitter, uniform in [0, that]."""

    initial: float = 1.0
    factor: float = 2.0
    max: float = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        _check("initial", self.initial, positive=True)
        _check("factor", self.factor)
        if self.factor < 1:
            raise _errors.InvalidArgument(f"factor must be >= 1, got {self.factor!r}")
        _check("max", self.max)

    @property
    def jittered(self) -> bool:
        return self.jitter

    def _wait(self) -> tenacity.wait.wait_base:
        return tenacity.wait_exponential(
            multiplier=self.initial, exp_base=self.factor, max=self.max
        )


Backoff = Fixed | Linear | Exponential
DEFAULT_BACKOFF: Backoff = Exponential()

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Backoff)


def encode(curve: Backoff) -> str:
    if not isinstance(curve, Fixed | Linear | Exponential):
        raise _errors.InvalidArgument(
            f"backoff must be Fixed, Linear or Exponential, got {type(curve).__name__}"
        )
    return _encoder.encode(curve).decode()


def decode(raw: str | bytes) -> Backoff:
    return _decoder.decode(raw)
