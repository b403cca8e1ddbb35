"""Backoff curves between attempts: Fixed, Linear, Exponential (with optional jitter).

The deterministic part of each curve is a tenacity wait strategy; jitter draws
from a `random.Random` the caller passes, so schedules are reproducible under
a seed. Exponential's jitter is "equal" by default (uniform between half the
delay and the delay: a retry never comes sooner than half of it), or "full"
(uniform between 0 and the delay). Curves are msgspec Structs, stored as JSON
with the queue or the job. See docs/adr/0006-queue-semantics.md.
"""

from __future__ import annotations

import math
import random
from typing import Literal

import msgspec
import tenacity

from alkstore import _errors


def _check(name: str, value: float, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _errors.InvalidArgument(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise _errors.InvalidArgument(f"{name} must be {bound}, got {value!r}")


Jitter = Literal["equal", "full"]


class _Curve(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    def _wait(self) -> tenacity.wait.wait_base:
        raise NotImplementedError

    @property
    def spread(self) -> Jitter | None:
        """The jitter drawn around the curve's value: None (none), "equal" or "full"."""
        return None

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
        state.attempt_number = max(1, attempt)
        base = float(self._wait()(state))
        spread = self.spread
        if spread == "equal":  # never sooner than half the delay
            return (rng or random).uniform(base / 2, base)
        if spread == "full":
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
    """initial * factor**(attempt-1), capped at max.

    jitter: True or "equal" (the default): uniform between half that and that;
    "full": uniform between 0 and that; False: exactly that."""

    initial: float = 1.0
    factor: float = 2.0
    max: float = 300.0
    jitter: bool | Jitter = True

    def __post_init__(self) -> None:
        _check("initial", self.initial, positive=True)
        _check("factor", self.factor)
        if self.factor < 1:
            raise _errors.InvalidArgument(f"factor must be >= 1, got {self.factor!r}")
        _check("max", self.max)
        if not isinstance(self.jitter, bool) and self.jitter not in ("equal", "full"):
            raise _errors.InvalidArgument(
                f'jitter must be True, False, "equal" or "full", got {self.jitter!r}'
            )
        if self.jitter == "equal":  # one spelling per curve: equal curves compare equal
            msgspec.structs.force_setattr(self, "jitter", True)

    @property
    def spread(self) -> Jitter | None:
        if self.jitter is True:
            return "equal"
        return self.jitter or None

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
