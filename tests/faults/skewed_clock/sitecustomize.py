"""A host clock jump for one test subprocess: put this folder on its PYTHONPATH.

Python imports `sitecustomize` at start-up, before the program's own modules, so
the process's wall clock (`time.time`, `time.time_ns`, `datetime.now/utcnow/today`)
reads `ALKSTORE_TEST_CLOCK_SKEW` seconds off from the moment it starts; after
`ALKSTORE_TEST_CLOCK_SKEW_FOR` seconds (monotonic; unset: forever) it jumps back to
the real time. `time.monotonic` and the database's clock are untouched, as in a real
host clock step. Used by tests/faults/test_scheduler_host_clock.py.
"""

from __future__ import annotations

import datetime as _datetime
import os
import sys
import time as _time
from typing import Any

_SKEW = float(os.environ.get("ALKSTORE_TEST_CLOCK_SKEW", "0"))
_FOR = float(os.environ.get("ALKSTORE_TEST_CLOCK_SKEW_FOR", "inf"))
_STARTED = _time.monotonic()
_real_time = _time.time
_real_time_ns = _time.time_ns
_real_datetime = _datetime.datetime


def skew() -> float:
    """Seconds the wall clock is off now."""
    return _SKEW if _time.monotonic() - _STARTED < _FOR else 0.0


def _time_skewed() -> float:
    return _real_time() + skew()


def _time_ns_skewed() -> int:
    return _real_time_ns() + round(skew() * 1e9)


class _DatetimeMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:  # real datetimes stay datetimes
        return isinstance(obj, _real_datetime)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _real_datetime)


class _SkewedDatetime(_real_datetime, metaclass=_DatetimeMeta):
    __slots__ = ()  # the C layout of datetime (C extensions check its size at import)

    @classmethod
    def now(cls, tz: _datetime.tzinfo | None = None) -> Any:
        return _real_datetime.now(tz) + _datetime.timedelta(seconds=skew())

    @classmethod
    def utcnow(cls) -> Any:
        return _real_datetime.now(_datetime.UTC).replace(tzinfo=None) + _datetime.timedelta(
            seconds=skew()
        )

    @classmethod
    def today(cls) -> Any:
        return cls.now()


if _SKEW:
    _time.time = _time_skewed
    _time.time_ns = _time_ns_skewed
    _datetime.datetime = _SkewedDatetime  # type: ignore[misc]
    print(
        f"skewed_clock: wall clock {_SKEW:+.0f} s for {_FOR} s (pid {os.getpid()})",
        file=sys.stderr,
        flush=True,
    )
