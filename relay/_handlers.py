"""Handler registration, typed payload decoding and the handler's control exceptions."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

import alkstore


class Retry(Exception):
    """Raise in a handler to retry the job (after `delay` seconds; None: the backoff curve)."""

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


class Fail(Exception):
    """Raise in a handler to dead-letter the job at once with `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Snooze(Exception):
    """Raise in a handler to put the job back for `delay` seconds without counting the
    attempt (`job.snooze`; docs/adr/0022): a downstream that says "not yet"."""

    def __init__(self, delay: float) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
            raise alkstore.InvalidArgument(f"Snooze delay must be >= 0 seconds, got {delay!r}")
        if delay == float("inf"):
            raise alkstore.InvalidArgument("Snooze delay must be finite, got inf")
        super().__init__(f"snoozed for {delay}s")
        self.delay = float(delay)


SyncHandler = Callable[[alkstore.Job[Any]], object]
AsyncHandler = Callable[[alkstore.Job[Any]], Awaitable[object]]


@dataclass
class Handler:
    queue: str
    fn: SyncHandler | AsyncHandler
    is_async: bool
    payload_type: Any  # None: hand the payload over as stored
    concurrency: int
    timeout: float | None


def payload_type(fn: Callable[..., object]) -> Any:
    """X from the first parameter's `Job[X]` annotation (None when absent or Any)."""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TypeError(f"handler {fn.__qualname__} must take the job as its first parameter")
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise alkstore.InvalidArgument(
            f"cannot resolve the annotations of handler {fn.__qualname__} ({exc}); define the "
            "payload type at module level, before the handler, or drop the annotation"
        ) from exc
    annotation = hints.get(params[0].name)
    if typing.get_origin(annotation) is alkstore.Job:
        (arg,) = typing.get_args(annotation)
        return None if arg is Any else arg
    return None


def make_handler(
    queue: str, fn: Callable[..., object], concurrency: int, timeout: float | None
) -> Handler:
    if concurrency < 1:
        raise alkstore.InvalidArgument(f"concurrency must be >= 1, got {concurrency!r}")
    if timeout is not None and not timeout > 0:
        raise alkstore.InvalidArgument(f"timeout must be > 0 seconds, got {timeout!r}")
    return Handler(
        queue=queue,
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        payload_type=payload_type(fn),
        concurrency=concurrency,
        timeout=timeout,
    )


def decode_into(job: alkstore.Job[Any], target: Any) -> None:
    """Decode the job's payload as the handler's annotated type, once; InvalidPayload if it
    does not fit (the worker dead-letters such a job at once: retrying cannot help)."""
    if target is None:
        job.payload  # noqa: B018 - decode now so a poison payload fails before the handler
        return
    name = job.type or "(plain payload)"
    is_event = isinstance(target, type) and issubclass(target, alkstore.Event)
    if is_event and job.type is not None:
        value = job.payload
        if not isinstance(value, target):
            raise alkstore.InvalidPayload(name, f"the handler expects {target.__qualname__}")
    else:
        try:
            value = msgspec.json.decode(job.raw, type=target)
        except msgspec.DecodeError as exc:
            raise alkstore.InvalidPayload(name, str(exc)) from exc
    job.__dict__["payload"] = value  # the cached_property's slot
