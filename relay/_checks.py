"""Argument checks for the processes' constructors (and the CLI flags that feed them):
a bad number is an `alkstore.InvalidArgument` naming the argument, before anything runs."""

from __future__ import annotations

import math

import alkstore


def count(name: str, value: object, low: int = 1) -> int:
    """An int >= `low` (bools are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise alkstore.InvalidArgument(f"{name} must be an int >= {low}, got {value!r}")
    return value


def seconds(name: str, value: object, *, zero: bool = False) -> float:
    """A finite number of seconds, > 0 (or >= 0 with zero=True)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        bound = ">= 0" if zero else "> 0"
        raise alkstore.InvalidArgument(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )
    return float(value)


def optional_seconds(name: str, value: object) -> float | None:
    return None if value is None else seconds(name, value)


DEFAULT_RETENTION = alkstore.Retention()  # the shipped policy (docs/adr/0018)


def retention(name: str, value: object) -> float | None:
    """A retention in seconds: None or 0 keep forever (None), else > 0 and finite."""
    if value is None or (value == 0 and not isinstance(value, bool)):
        return None
    return seconds(name, value)
