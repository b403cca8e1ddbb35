"""The bad-payload catalogue (issue 14): a payload alkstore could not give back as it went
in is refused where it enters, on every path and both engines, with a typed error, and
nothing is written (docs/adr/0003, addendum 2026-12-01).

Refused: event fields that do not match their Struct (they would poison every
subscriber), NaN and infinity (JSON has neither: they became null), values a plain
payload cannot carry (datetime, Decimal, set, tuple, bytes, non-str keys...: they came
back as str or list), NUL characters (PostgreSQL's jsonb and text cannot hold them), and
events over the payload limit. What fits comes back equal, typed event fields included.
"""

from __future__ import annotations

import enum
import math
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import msgspec
import pytest

import alkstore
from alkstore import JobSpec
from tests.conftest import Backend
from tests.events import OrderPlaced

LIMIT = 4096


class Counted(alkstore.Event, tag="bad.counted"):
    n: int


class Measured(alkstore.Event, tag="bad.measured"):
    x: float
    y: float | None = None


class Loose(alkstore.Event, tag="bad.loose"):
    data: dict[str, Any]


class Named(alkstore.Event, tag="bad.named"):
    name: str


class Blob(alkstore.Event, tag="bad.blob"):
    text: str


class Typed(alkstore.Event, tag="bad.typed"):
    when: datetime
    day: date
    amount: Decimal
    tags: set[str]
    pair: tuple[int, int]
    ids: dict[int, str]
    raw: bytes
    ratio: float


class Color(enum.Enum):
    RED = "red"


OK = OrderPlaced(order_id=1)


@pytest.fixture
def pstore(backend: Backend) -> Iterator[alkstore.Store]:
    with backend.migrated(max_payload_bytes=LIMIT) as store:
        yield store


def own_transaction(backend: Backend, work: Callable[[Any], None]) -> None:
    """`work(conn)` inside a transaction on a connection the application owns."""
    conn = backend.raw_connection()
    try:
        if backend.name == "sqlite":
            with conn:
                work(conn)
        else:
            with conn.transaction():
                work(conn)
    finally:
        conn.close()


Path = Callable[[alkstore.Store, Backend, Any], object]


def _tx(fn: Callable[[alkstore.Transaction], object]) -> Callable[[alkstore.Store], None]:
    def run(store: alkstore.Store) -> None:
        with store.transaction() as tx:
            fn(tx)

    return run


EVENT_PATHS: dict[str, Path] = {
    "tx.append": lambda s, b, e: _tx(lambda tx: tx.append(e))(s),
    "tx.append_many": lambda s, b, e: _tx(lambda tx: tx.append_many([OK, e]))(s),
    "tx.append_many(41)": lambda s, b, e: _tx(lambda tx: tx.append_many([OK] * 40 + [e]))(s),
    "alkstore.append": lambda s, b, e: own_transaction(
        b, lambda c: alkstore.append(c, e, namespace=b.namespace, max_payload_bytes=LIMIT)
    ),
    "alkstore.append_many(41)": lambda s, b, e: own_transaction(
        b,
        lambda c: alkstore.append_many(
            c, [OK] * 40 + [e], namespace=b.namespace, max_payload_bytes=LIMIT
        ),
    ),
    "schedules.add": lambda s, b, e: s.schedules.add("s", every="1h", event=e),
}

ENQUEUE_PATHS: dict[str, Path] = {
    "enqueue": lambda s, b, v: s.queue("jobs").enqueue(v),
    "enqueue(options)": lambda s, b, v: s.queue("jobs").enqueue(v, priority=1, delay=1),
    "tx.enqueue": lambda s, b, v: _tx(lambda tx: tx.enqueue("jobs", v))(s),
    "tx.enqueue(options)": lambda s, b, v: _tx(lambda tx: tx.enqueue("jobs", v, priority=1))(s),
    "enqueue_many": lambda s, b, v: s.queue("jobs").enqueue_many(["ok", v]),
    "enqueue_many(41)": lambda s, b, v: s.queue("jobs").enqueue_many(["ok"] * 40 + [v]),
    "JobSpec": lambda s, b, v: s.queue("jobs").enqueue_many([JobSpec(v, priority=2)] * 9),
}


def refused(error: type[Exception], match: str, paths: dict[str, Path], *args: Any) -> list[Any]:
    """Run every path with `args`; each must raise `error` with a message matching `match`."""
    caught = []
    for name, path in paths.items():
        try:
            path(*args)
        except error as exc:
            assert re.search(match, str(exc)), f"{name}: {exc}"
            caught.append(exc)
        except Exception as exc:
            raise AssertionError(f"{name}: raised {exc!r}, expected {error.__name__}") from exc
        else:
            raise AssertionError(f"{name}: accepted, expected {error.__name__}")
    return caught


def assert_nothing_written(store: alkstore.Store) -> None:
    assert store.log.head() == 0
    assert store.queue("jobs").stats() == alkstore.QueueStats(0, 0, 0, 0, None)
    assert store.schedules.list() == []


BAD_VALUES = [
    pytest.param(math.nan, r"NaN .*at `\$`", id="nan"),
    pytest.param(math.inf, r"inf", id="inf"),
    pytest.param(-math.inf, r"-inf", id="-inf"),
    pytest.param({"x": [1.0, math.nan]}, r"NaN .*at `\$\.x\[1\]`", id="nested-nan"),
    pytest.param(datetime(2026, 1, 1, tzinfo=UTC), r"datetime\.datetime .*as str", id="datetime"),
    pytest.param({"when": date(2026, 1, 1)}, r"datetime\.date at `\$\.when`", id="nested-date"),
    pytest.param(Decimal("1.50"), r"decimal\.Decimal .*as str", id="decimal"),
    pytest.param([Decimal("2")], r"decimal\.Decimal at `\$\[0\]`", id="nested-decimal"),
    pytest.param({1, 2}, r"set .*as list", id="set"),
    pytest.param({"s": frozenset()}, r"frozenset at `\$\.s`", id="frozenset"),
    pytest.param((1, 2), r"tuple .*as list", id="tuple"),
    pytest.param({1: "a"}, r"dict key 1 \(int\)", id="int-key"),
    pytest.param(b"raw", r"bytes .*as str", id="bytes"),
    pytest.param(uuid.UUID(int=1), r"uuid\.UUID", id="uuid"),
    pytest.param(Color.RED, r"Color", id="enum"),
    pytest.param("a\x00b", r"NUL .*at `\$`", id="nul"),
    pytest.param({"k\x00": 1}, r"NUL .*dict key", id="nul-key"),
]


@pytest.mark.parametrize(("value", "message"), BAD_VALUES)
def test_a_plain_payload_that_would_change_is_refused(
    pstore: alkstore.Store, backend: Backend, value: object, message: str
) -> None:
    errors = refused(alkstore.InvalidPayload, message, ENQUEUE_PATHS, pstore, backend, value)
    assert {error.type_name for error in errors} == {None}
    assert_nothing_written(pstore)


BAD_EVENTS = [
    pytest.param(
        Counted(n="notint"),  # type: ignore[arg-type]
        r"Expected `int`, got `str` - at `\$\.n`",
        id="wrong-type",
    ),
    pytest.param(Measured(x=math.nan), r"NaN .*at `\$\.x`", id="nan"),
    pytest.param(Measured(x=1.0, y=math.inf), r"inf .*at `\$\.y`", id="inf-optional"),
    pytest.param(Loose(data={"at": datetime(2026, 1, 1)}), r"datetime\.datetime at", id="any-dt"),
    pytest.param(Loose(data={"n": Decimal(1)}), r"decimal\.Decimal at `\$\.data\.n`", id="any-dec"),
    pytest.param(Loose(data={"s": {1}}), r"set at `\$\.data\.s`", id="any-set"),
    pytest.param(Named(name="a\x00b"), r"NUL .*at `\$\.name`", id="nul"),
]


ALL_PATHS = {**EVENT_PATHS, **ENQUEUE_PATHS}


@pytest.mark.parametrize(("event", "message"), BAD_EVENTS)
def test_an_event_that_would_not_decode_as_it_went_in_is_refused(
    pstore: alkstore.Store, backend: Backend, event: alkstore.Event, message: str
) -> None:
    errors = refused(alkstore.InvalidPayload, message, ALL_PATHS, pstore, backend, event)
    assert {error.type_name for error in errors} == {type(event).__struct_config__.tag}
    assert_nothing_written(pstore)


def test_an_event_over_the_limit_is_refused_on_every_path(
    pstore: alkstore.Store, backend: Backend
) -> None:
    big = Blob(text="x" * LIMIT)
    errors = refused(alkstore.PayloadTooLarge, "over the limit", ALL_PATHS, pstore, backend, big)
    assert {(error.limit, error.size > LIMIT) for error in errors} == {(LIMIT, True)}
    assert all(isinstance(error, alkstore.InvalidPayload) for error in errors)  # one except
    assert_nothing_written(pstore)


def test_an_event_at_the_limit_is_appended_and_relayed(pstore: alkstore.Store) -> None:
    empty = len(msgspec.json.encode(Blob(text="")))
    event = Blob(text="x" * (LIMIT - empty))
    pstore.subscribe("blobs", ["bad.blob"])
    with pstore.transaction() as tx:
        tx.append(event)
    assert pstore.relay_batch() == (1, 1)
    job = pstore.queue("blobs").claim()
    assert job is not None and job.payload == event


def test_own_connection_appends_default_to_the_store_default_limit(backend: Backend) -> None:
    with backend.migrated():
        pass
    big = Blob(text="x" * 1_048_576)
    with pytest.raises(alkstore.PayloadTooLarge) as info:
        own_transaction(backend, lambda c: alkstore.append(c, big, namespace=backend.namespace))
    assert info.value.limit == 1_048_576
    with backend.migrated() as store:
        assert store.log.head() == 0


PLAIN_GOOD = [
    {"a": [1, 2.5, None, True, False, "x"], "b": {}, "c": {"d": [[]]}},
    [],
    "",
    0,
    -(2**63),
    2**70,
    0.1,
    1e-7,
    "a\\u0000 is six characters, not a NUL",
    "é ✓ \U0001f600",
    None,
]


@pytest.mark.parametrize("path", ["enqueue", "tx.enqueue", "enqueue_many", "enqueue_many(41)"])
def test_plain_json_values_come_back_equal_and_of_the_same_type(
    pstore: alkstore.Store, backend: Backend, path: str
) -> None:
    for value in PLAIN_GOOD:
        ENQUEUE_PATHS[path](pstore, backend, value)
    got = [job.payload for job in pstore.queue("jobs").claim_many(1000)]
    got = [value for value in got if value != "ok"]  # the batches' first items
    assert got == PLAIN_GOOD
    assert [type(v) for v in got] == [type(v) for v in PLAIN_GOOD]


TYPED = Typed(
    when=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    day=date(2026, 1, 2),
    amount=Decimal("1.50"),
    tags={"a", "b"},
    pair=(1, 2),
    ids={1: "one"},
    raw=b"\x00\x01",
    ratio=1,
)


def test_typed_event_fields_round_trip_through_log_relay_and_queues(
    pstore: alkstore.Store, backend: Backend
) -> None:
    pstore.subscribe("typed", ["bad.typed"])
    for path in ("tx.append", "tx.append_many(41)", "alkstore.append"):
        EVENT_PATHS[path](pstore, backend, TYPED)
    entries = [e for e in pstore.log.read(limit=1000) if e.type == "bad.typed"]
    assert [e.payload for e in entries] == [TYPED] * 3
    assert pstore.relay_batch()[0] == 3
    for path in ("enqueue", "tx.enqueue", "enqueue_many(41)"):
        ENQUEUE_PATHS[path](pstore, backend, TYPED)
    jobs = pstore.queue("typed").claim_many(10) + pstore.queue("jobs").claim_many(100)
    assert [j.payload for j in jobs if j.type == "bad.typed"] == [TYPED] * 6
    assert jobs[0].payload.tags == {"a", "b"} and jobs[0].payload.pair == (1, 2)


def test_nul_in_keys_and_headers_is_refused_on_both_engines(
    pstore: alkstore.Store, backend: Backend
) -> None:
    """PostgreSQL cut a key at its NUL (libpq text): `k\\x00x` was stored as `k`."""
    q = pstore.queue("jobs")
    cases: list[tuple[Callable[[], object], type[Exception]]] = [
        (lambda: _tx(lambda tx: tx.append(OK, key="k\x00x"))(pstore), alkstore.InvalidArgument),
        (
            lambda: _tx(lambda tx: tx.append_many([OK], key="k\x00"))(pstore),
            alkstore.InvalidArgument,
        ),
        (
            lambda: own_transaction(
                backend, lambda c: alkstore.append(c, OK, key="\x00", namespace=backend.namespace)
            ),
            alkstore.InvalidArgument,
        ),
        (lambda: q.enqueue("x", dedupe_key="k\x00x"), alkstore.InvalidArgument),
        (lambda: q.enqueue_many(["x"], dedupe_key="k\x00"), alkstore.InvalidArgument),
        (lambda: q.enqueue_many([JobSpec("x", dedupe_key="k\x00")] * 9), alkstore.InvalidArgument),
        (
            lambda: pstore.schedules.add("s", every="1h", event=OK, key="\x00"),
            alkstore.InvalidArgument,
        ),
        (
            lambda: _tx(lambda tx: tx.append(OK, headers={"h": "v\x00"}))(pstore),
            alkstore.EventError,
        ),
        (lambda: q.enqueue("x", headers={"h\x00": "v"}), alkstore.EventError),
        (lambda: q.enqueue_many([JobSpec("x", headers={"h": "\x00"})] * 9), alkstore.EventError),
    ]
    for attempt, error in cases:
        with pytest.raises(error, match="NUL"):
            attempt()
    assert_nothing_written(pstore)


def test_a_nul_in_a_failure_reason_is_stored_visibly_on_both_engines(
    pstore: alkstore.Store,
) -> None:
    q = pstore.queue("jobs")
    q.enqueue("x", max_attempts=2)
    job = q.claim()
    assert job is not None
    job.retry(delay=0, error="first\x00error")
    job = q.claim()
    assert job is not None
    job.fail("bad\x00reason")
    (dead,) = q.dead_letters()
    assert dead.reason == "bad\\x00reason"
    assert [a.error for a in dead.history] == ["first\\x00error", "bad\\x00reason"]


@pytest.mark.parametrize(
    ("progress", "message"),
    [({"x": math.nan}, "NaN"), (datetime(2026, 1, 1), "datetime"), ("a\x00", "NUL")],
)
def test_heartbeat_progress_that_would_change_is_refused(
    pstore: alkstore.Store, progress: object, message: str
) -> None:
    q = pstore.queue("jobs")
    q.enqueue("x")
    job = q.claim()
    assert job is not None
    with pytest.raises(alkstore.InvalidPayload, match=message):
        job.heartbeat(progress=progress)
    job.heartbeat(progress={"done": 0.5})  # still held: a refused heartbeat changed nothing
    job.ack()
