"""Bulk enqueue (docs/adr/0013): many jobs in one transaction at the database's bulk speed.

Every item is checked and encoded before any SQL runs. Then, in one transaction,
`bulk_start` reads the batch's time (the database's clock, or the injected test
clock), the queue's default max_attempts and which of the batch's dedupe keys live
jobs hold. Dedupe is decided here, once for both engines, in input order, as one
enqueue per item would decide it; the engine inserts the rest in one go
(PostgreSQL: COPY; SQLite: one executemany). A batch smaller than the engine's
`bulk_min` takes one INSERT per job instead (the same statements as `enqueue`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from itertools import compress
from typing import Any, Literal, cast

import msgspec

from alkstore import _backoff, _checks, _effects, _engine, _errors, _events, _ordering, _tracing

OnDuplicate = Literal["raise", "ignore", "replace"]
RACES = 5  # runs of a batch whose dedupe keys other transactions keep taking (PostgreSQL)

Options = tuple[
    int,
    int | None,
    int,
    int | None,
    int | None,
    int | None,
    str | None,
    str | None,
    str | None,
    str | None,
]
"""A job's checked options: (priority, run_at, delay_ms, expires_at, expires_ms,
max_attempts, backoff JSON, dedupe_key, headers JSON, group); run_at and expires_at
absolute, delay_ms and expires_ms relative to the batch's time."""

_INF = float("inf")
_decode_keys = msgspec.json.Decoder(list[str]).decode
_encode_json = msgspec.json.Encoder().encode


class _Payload(msgspec.Struct, frozen=True):
    payload: Any


class JobSpec(_Payload, frozen=True, kw_only=True):
    """One job of `Queue.enqueue_many` with options of its own:
    `JobSpec(payload, delay=5, priority=1, dedupe_key="k", max_attempts=3)`.

    The options are those of `Queue.enqueue`. One left None takes the value passed to
    `enqueue_many` for the whole batch (else the default); a job that sets `delay` or
    `run_at` sets its run time whole."""

    delay: float | None = None
    run_at: datetime | float | None = None
    priority: int | None = None
    max_attempts: int | None = None
    backoff: _backoff.Backoff | None = None
    expires: datetime | float | None = None
    dedupe_key: str | None = None
    headers: dict[str, str] | None = None
    group: str | None = None


class Batch:
    """A checked batch: payload JSON texts and event types, and the options of each job
    (`options` None: every job has the batch's `base`); `grouped`: a job has a group
    (docs/adr/0021), so the rows carry their key and ordering key."""

    __slots__ = ("base", "grouped", "options", "texts", "types")

    def __init__(self, items: Iterable[object], shared: dict[str, Any], limit: int) -> None:
        self.base = options(**shared)
        values = list(items)
        self.options: list[Options] | None = None
        kinds = set(map(type, values))
        if kinds == {JobSpec}:  # the common per-job case: no isinstance per item
            base = self.base
            specs = cast(list[JobSpec], values)
            self.options = [_spec_options(item, base) for item in specs]
            values = [item.payload for item in specs]
        elif any(issubclass(kind, JobSpec) for kind in kinds):
            base = self.base
            self.options = [
                _spec_options(item, base) if isinstance(item, JobSpec) else base for item in values
            ]
            values = [item.payload if isinstance(item, JobSpec) else item for item in values]
        self.types, self.texts = _checks.encode_payloads(values, limit)
        if self.options is None:
            self.grouped = self.base[9] is not None
        else:
            self.grouped = any(o[9] is not None for o in self.options)

    def __len__(self) -> int:
        return len(self.texts)

    def keys(self) -> list[str | None]:
        """Each job's dedupe key."""
        if self.options is None:
            return [self.base[7]] * len(self.texts)
        return [o[7] for o in self.options]

    def relative(self) -> list[tuple[Options, str | None, str]]:
        """(options, type, payload) of each job."""
        every = self.options or [self.base] * len(self.texts)
        return list(zip(every, self.types, self.texts, strict=True))

    def rows(
        self, queue: str, now: int, default: int, keep: list[bool] | None
    ) -> list[_engine.JobRow]:
        """The jobs to insert, times made absolute with the batch's `now`."""
        types, texts = self.types, self.texts
        if keep is not None:
            types, texts = list(compress(types, keep)), list(compress(texts, keep))
        if self.options is None:
            p, r, d, ea, em, m, b, k, h, _ = self.base
            run = now + d if r is None else r
            end = ea if em is None else now + em
            m = default if m is None else m
            jobs = zip(types, texts, strict=True)
            return [(queue, now, p, run, end, m, b, k, t, h, pl) for t, pl in jobs]
        every = self.options if keep is None else list(compress(self.options, keep))
        return [
            (queue, now, p, now + d if r is None else r, ea if em is None else now + em,
             default if m is None else m, b, k, t, h, pl)
            for (p, r, d, ea, em, m, b, k, h, _), t, pl in zip(every, types, texts, strict=True)
        ]  # fmt: skip

    def grouped_rows(
        self, queue: str, now: int, default: int, ordered: bool, keep: list[bool] | None
    ) -> list[_engine.GroupedRow]:
        """`rows` with each job's key (its group) and ordering key (the group, in an
        ordered queue), as `enqueue(group=)` writes them."""
        every = self.options or [self.base] * len(self.texts)
        if keep is not None:
            every = list(compress(every, keep))
        return [
            (*row, o[9], o[9] if ordered else None)
            for row, o in zip(self.rows(queue, now, default, keep), every, strict=True)
        ]


def _expires(value: datetime | float) -> tuple[int | None, int | None]:
    if isinstance(value, datetime):
        return _checks.instant_ms("expires", value), None
    return None, int(_checks.seconds("expires", value) * 1000)


def _headers(headers: dict[str, str] | None) -> str | None:
    """Stored headers JSON, with the current span's trace context (docs/adr/0019)."""
    encoded = _events.codec.encode_headers(_tracing.merged(headers))
    return encoded.decode() if encoded else None


def options(
    *,
    delay: float | None = None,
    run_at: datetime | float | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    backoff: _backoff.Backoff | None = None,
    expires: datetime | float | None = None,
    dedupe_key: str | None = None,
    headers: dict[str, str] | None = None,
    group: str | None = None,
) -> Options:
    """The options of `enqueue`, checked."""
    if delay is not None and run_at is not None:
        raise _errors.InvalidArgument("pass delay or run_at, not both")
    run_at_ms, delay_ms = None, 0
    if delay is not None:
        delay_ms = int(_checks.seconds("delay", delay) * 1000)
    elif run_at is not None:
        run_at_ms = _checks.instant_ms("run_at", run_at)
    expires_at, expires_ms = (None, None) if expires is None else _expires(expires)
    return (
        _checks.whole("priority", priority, -_checks.INT32),
        run_at_ms,
        delay_ms,
        expires_at,
        expires_ms,
        None if max_attempts is None else _checks.whole("max_attempts", max_attempts, 1),
        None if backoff is None else _backoff.encode(backoff),
        _checks.dedupe_key(dedupe_key),
        _headers(headers),
        None if group is None else _ordering.check_group(group),
    )


def _spec_options(spec: JobSpec, base: Options) -> Options:
    """A JobSpec's options over the batch's. Only what it sets is checked, the common
    cases inline (this runs once per job); anything else goes to the _checks function,
    which raises the error or returns the same value."""
    priority, run_at, delay_ms, expires_at, expires_ms, attempts, backoff, key, headers, group = (
        base
    )
    delay, when = spec.delay, spec.run_at
    if delay is not None:
        if when is not None:
            raise _errors.InvalidArgument("pass delay or run_at, not both")
        kind = type(delay)
        if not ((kind is int or kind is float) and 0 <= delay < _INF):
            delay = _checks.seconds("delay", delay)
        run_at, delay_ms = None, int(delay * 1000)
    elif when is not None:
        run_at, delay_ms = _checks.instant_ms("run_at", when), 0
    value = spec.priority
    if value is not None:
        if not (type(value) is int and -_checks.INT32 <= value <= _checks.INT32):
            value = _checks.whole("priority", value, -_checks.INT32)
        priority = value
    value = spec.max_attempts
    if value is not None:
        if not (type(value) is int and 1 <= value <= _checks.INT32):
            value = _checks.whole("max_attempts", value, 1)
        attempts = value
    if spec.expires is not None:
        expires_at, expires_ms = _expires(spec.expires)
    if spec.backoff is not None:
        backoff = _backoff.encode(spec.backoff)
    if spec.dedupe_key is not None:
        key = spec.dedupe_key if type(spec.dedupe_key) is str else None
        if not key or "\x00" in key:
            key = _checks.dedupe_key(spec.dedupe_key)
    if spec.headers is not None:
        headers = _headers(spec.headers)
    if spec.group is not None:
        group = _ordering.check_group(spec.group)
    return (priority, run_at, delay_ms, expires_at, expires_ms, attempts, backoff, key, headers,
            group)  # fmt: skip


def enqueue_many(
    engine: _engine.Engine,
    queue: str,
    items: Iterable[object],
    *,
    now: int | None,
    limit: int,
    on_duplicate: OnDuplicate,
    options: dict[str, Any],
) -> list[int | None]:
    """`Queue.enqueue_many`: ids in input order, None for an ignored duplicate."""
    if on_duplicate not in ("raise", "ignore", "replace"):
        raise _errors.InvalidArgument(
            f'on_duplicate must be "raise", "ignore" or "replace", got {on_duplicate!r}'
        )
    batch = Batch(items, options, limit)
    if not batch:
        return []
    if len(batch) < engine.bulk_min or on_duplicate == "replace":  # replace: one by one
        ids = _one_by_one(engine, queue, batch, now, on_duplicate)
    else:
        ids = _bulk(engine, queue, batch, now, on_duplicate)
    engine.committed()
    return ids


def _one_by_one(
    engine: _engine.Engine, queue: str, batch: Batch, now: int | None, on_duplicate: OnDuplicate
) -> list[int | None]:
    """A small batch: the `enqueue` statement once per job, in one transaction."""
    params = [
        {
            "queue": queue,
            "priority": p,
            "run_at": r,
            "delay_ms": d,
            "now": now,
            "expires_at": ea,
            "expires_ms": em,
            "max_attempts": m,
            "backoff": b,
            "dedupe_key": k,
            "type": t,
            "key": g,
            "position": None,
            "headers": h,
            "payload": pl,
        }
        for (p, r, d, ea, em, m, b, k, h, g), t, pl in batch.relative()
    ]
    keys = batch.keys()
    name = "enqueue" if all(key is None for key in keys) else "enqueue_dedupe"
    ids: list[int | None] = []
    if on_duplicate == "replace":  # in input order: a later job replaces an earlier one
        with engine.transaction() as conn:
            for param in params:
                if param["dedupe_key"] is None:
                    ids.append(int(engine.run_in(conn, "enqueue", param)[0][0]))
                else:
                    ids.append(_effects.replace_in(engine, conn, param))
        return ids
    with engine.transaction() as conn:
        for result, key in zip(engine.run_many_in(conn, name, params), keys, strict=True):
            if result:
                ids.append(int(result[0][0]))
            elif on_duplicate == "ignore" or key is None:
                ids.append(None)
            else:  # raised inside the transaction: the batch rolls back
                raise _errors.DuplicateJob(queue, key)
    return ids


def _fresh(
    queue: str, keys: list[str | None], live: set[str], on_duplicate: OnDuplicate
) -> list[bool] | None:
    """Which jobs to insert (None: all). A key is taken by a live job or by an earlier
    job of the batch; "raise" names the first such key in input order."""
    keep: list[bool] | None = None
    seen: set[str] = set()
    for index, key in enumerate(keys):
        if key is None:
            continue
        if key in live or key in seen:
            if on_duplicate == "raise":
                raise _errors.DuplicateJob(queue, key)
            if keep is None:
                keep = [True] * len(keys)
            keep[index] = False
        seen.add(key)
    return keep


def _bulk(
    engine: _engine.Engine, queue: str, batch: Batch, now: int | None, on_duplicate: OnDuplicate
) -> list[int | None]:
    """The batch in one transaction. The first run trusts that no live job holds a key of
    the batch (looking 50,000 keys up costs about a third of their COPY); when one does,
    the insert fails with KeyTaken, and the batch runs again and looks them up first."""
    keys = batch.keys()
    distinct = list(dict.fromkeys(key for key in keys if key is not None))
    clash = len(distinct) < len(keys) - keys.count(None)  # a key twice in the batch
    looked_up = _encode_json(distinct).decode()
    params = {"queue": queue, "now": now, "keys": "[]"}
    for run in range(RACES):
        try:
            with engine.transaction() as conn:
                start, default, live, ordered = engine.run_in(conn, "bulk_start", params)[0]
                taken = set(_decode_keys(live))
                keep = _fresh(queue, keys, taken, on_duplicate) if clash or taken else None
                if batch.grouped:  # the rows carry key and grp (docs/adr/0021)
                    grouped = batch.grouped_rows(queue, start, default, bool(ordered), keep)
                    inserted = engine.insert_jobs(conn, grouped, grouped=True) if grouped else []
                else:
                    rows = batch.rows(queue, start, default, keep)
                    inserted = engine.insert_jobs(conn, rows) if rows else []
            break
        except _engine.KeyTaken:
            if not distinct or run == RACES - 1:
                raise
            params["keys"] = looked_up
    if keep is None:
        return list(inserted)
    got = iter(inserted)
    return [next(got) if k else None for k in keep]
